"""Reading a list page by page, by offset, while it changes, without missing an entry.

``GET /jobs`` lists jobs newest first and pages by ``offset`` only (no cursor). With a filter
on something that changes (a job's state), a job already read that leaves the filter moves
every later one a place forward, and the next page by offset would start one job too far:
``danlu ls --all --state PENDING`` missed a job that was pending the whole time. So each page
is asked to start on an entry already read (an anchor), which proves that nothing between
the two pages was skipped; when the page starts on an unread entry instead, the list moved
by more than the overlap and the reader looks further back.

A list that ignores ``offset`` (a server or proxy of another kind in the way: every request
answers the first page) made that loop endless, each page anchored on the one before and
bringing nothing new: a full page that brings nothing and repeats the one before is checked
against the list's head, and when that is the same page too :class:`StalledListError` says
so (:func:`read_pages`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import TypeVar

from danlu.core.errors import DataError, SpecError
from danlu.core.values import is_whole_number, quoted

T = TypeVar("T")


class StalledListError(DataError):
    """The list :func:`read_pages` reads answers the same full page at ``offset`` as at
    offset 0: it ignores ``offset``, so no entry past its first page can be read (``limit``:
    the entries a request asked for)."""

    def __init__(self, offset: int, limit: int) -> None:
        self.offset = offset
        self.limit = limit
        super().__init__(
            f"the list answered the same {limit} entries at offset {offset} as at offset 0: "
            "it ignores 'offset', so nothing past its first page can be read (is a server "
            "of another version, or a proxy that drops the query, in the way?)"
        )


def read_pages(
    fetch: Callable[[int, int], Sequence[T]],
    key: Callable[[T], Hashable],
    page: int,
    max_limit: int,
) -> Iterator[T]:
    """Every entry of the list ``fetch(offset, limit)`` reads, in its order, each once:
    every entry that is in the list from the first page to the last is yielded, whatever
    enters or leaves it meanwhile (an entry that enters behind the pages already read may be
    missed; one that leaves after it was read is not taken back).

    The list must keep one order (``GET /jobs``: submission order, newest first), entries
    named by ``key``. Each request reads ``page`` new places and overlaps the last one read
    (``limit`` at most ``max_limit``); when its first entry is not one already read, the
    entries before it moved up by more than the overlap, and the request is made again with
    twice the overlap, down to offset 0 at worst.

    A full page that brings no new entry and repeats the page before it (as a list that
    ignores ``offset`` answers, or one that grew at its head by exactly the step between
    them) is checked once by asking for offset 0 and for the page after it, with the same
    ``limit``: when both are that page again, the list ignores ``offset`` and
    :class:`StalledListError` is raised (the loop asked for the same page forever). The
    head alone was not enough: a list that grew at its head by the step and lost that entry
    again before its head was read (a job submitted, then started, under ``danlu ls
    --state PENDING --all``) answered the same page there too, and was refused as one that
    ignores ``offset``."""
    if not is_whole_number(page):  # text was a bare TypeError at the comparison below
        raise SpecError("page", f"must be a whole number of entries (got {quoted(page)})")
    if page < 1:
        raise SpecError("page", f"must be at least 1 (got {page})")
    if max_limit < 2:
        raise SpecError("max_limit", f"must be at least 2 to overlap a page (got {max_limit})")
    seen: set[Hashable] = set()
    position = 0  # the place after the last entry read, in the list as it was read
    overlap = 0
    before: list[Hashable] = []  # the keys of the page read before, in order
    checked: list[Hashable] = []  # the last page checked against the list's head
    while True:
        offset = max(0, position - overlap)
        limit = min(max_limit, page + position - offset)
        batch = fetch(offset, limit)
        if offset > 0 and not (batch and key(batch[0]) in seen):
            overlap = max(1, 2 * overlap)  # the list moved past the overlap: look back
            continue
        keys = [key(entry) for entry in batch]
        last_read = max((i for i, one in enumerate(keys) if one in seen), default=-1)
        full = offset > 0 and len(batch) >= limit
        if full and last_read == len(batch) - 1 and keys == before != checked:
            # nothing new, the page before again: the list may ignore offset (or have
            # grown at its head by the step exactly); its head tells which, once a page
            checked = keys
            if _same_page(fetch, key, 0, limit, keys) and _same_page(
                fetch, key, offset + limit, limit, keys
            ):
                raise StalledListError(offset, limit)
        for entry, one in zip(batch[last_read + 1 :], keys[last_read + 1 :], strict=True):
            seen.add(one)
            yield entry
        if len(batch) < limit:
            return
        position, overlap, before = offset + len(batch), 1, keys


def _same_page(
    fetch: Callable[[int, int], Sequence[T]],
    key: Callable[[T], Hashable],
    offset: int,
    limit: int,
    keys: list[Hashable],
) -> bool:
    """Whether the list answers the entries named ``keys``, in order, at ``offset``."""
    return [key(entry) for entry in fetch(offset, limit)] == keys
