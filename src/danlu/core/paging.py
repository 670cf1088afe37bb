"""Reading a list page by page, by offset, while it changes, without missing an entry.

``GET /jobs`` lists jobs newest first and pages by ``offset`` only (no cursor). With a filter
on something that changes (a job's state), a job already read that leaves the filter moves
every later one a place forward, and the next page by offset would start one job too far:
``danlu ls --all --state PENDING`` missed a job that was pending the whole time. So each page
is asked to start on an entry already read (an anchor), which proves that nothing between
the two pages was skipped; when the page starts on an unread entry instead, the list moved
by more than the overlap and the reader looks further back.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import TypeVar

from danlu.core.errors import SpecError

T = TypeVar("T")


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
    twice the overlap, down to offset 0 at worst."""
    if page < 1:
        raise SpecError("page", f"must be at least 1 (got {page})")
    if max_limit < 2:
        raise SpecError("max_limit", f"must be at least 2 to overlap a page (got {max_limit})")
    seen: set[Hashable] = set()
    position = 0  # the place after the last entry read, in the list as it was read
    overlap = 0
    while True:
        offset = max(0, position - overlap)
        limit = min(max_limit, page + position - offset)
        batch = fetch(offset, limit)
        if offset > 0 and not (batch and key(batch[0]) in seen):
            overlap = max(1, 2 * overlap)  # the list moved past the overlap: look back
            continue
        last_read = max((i for i, entry in enumerate(batch) if key(entry) in seen), default=-1)
        for entry in batch[last_read + 1 :]:
            seen.add(key(entry))
            yield entry
        if len(batch) < limit:
            return
        position, overlap = offset + len(batch), 1
