"""Following a stream of rows by id (``danlu events -f``, ``danlu metrics -f``) without
missing the rows that commit late: :class:`GapCursor`."""

from __future__ import annotations

import json
import time
from collections import Counter, deque
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

from danlu.cli.reply_fields import WHOLE, needed

GRACE_SECONDS = 10.0
"""How long a row may stay invisible after a higher id is: longer than any danlu
transaction takes from its insert to its commit."""
PAGE = 1000
"""Rows asked for per request while following (the most ``GET /events`` answers)."""

Row = TypeVar("Row")


class GapCursor:
    """The ``after_id`` to follow a stream from, and which rows read from it are new.

    Why: the server's ids come from a sequence (PostgreSQL) and are taken when a row is
    inserted, not when its transaction commits, so id 101 can be visible before id 100 is; a
    follower asking for ``id > highest seen`` would never see 100. Ids also have permanent
    holes (an insert rolled back), so waiting for a hole to fill must end.

    How: each read is remembered with the highest id it covered and the time it came back (on
    ``clock``). Every id up to that one was inserted before then, so it has committed or
    rolled back once ``grace`` has passed: :meth:`after` moves the cursor to a read's id only
    then (and at once over ids all seen, which hide no hole). Reads start at the cursor, so a
    late row turns up in a later read; :meth:`fresh` and :meth:`fresh_ids` drop the rows
    already returned, so each row comes out once. The rows returned above the cursor are
    remembered until the cursor passes them. Use one cursor for rows with ids
    (:meth:`fresh_ids`) or for rows without (:meth:`fresh`), not both.
    """

    def __init__(
        self,
        after: int = 0,
        *,
        grace: float = GRACE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._after = after
        self._grace = grace
        self._clock = clock
        self._reads: deque[tuple[int, float]] = deque()
        """(highest id covered so far, when that read came back), oldest first."""
        self._shown: list[tuple[int, Hashable]] = []
        """(an id at or above the row's, its key) of each row returned above the cursor."""
        self._counts: Counter[Hashable] = Counter()
        """How many rows of each key :attr:`_shown` holds."""

    def after(self) -> int:
        """The ``after_id`` for the next read (call it just before the read): every id at or
        below it has been returned, or is a hole older than the grace."""
        settled = self._clock() - self._grace
        while self._reads and self._reads[0][1] <= settled:
            self._after = max(self._after, self._reads.popleft()[0])
        self._forget()
        return self._after

    def fresh(self, rows: Sequence[Row], cursor: int, key: Callable[[Row], Hashable]) -> list[Row]:
        """Of ``rows`` (everything stored after :meth:`after`, by id, read just now; ``cursor``:
        the highest id they cover), those not returned before, in their order; rows without
        ids are told apart by ``key`` (equal keys count as many rows as there are)."""
        return self._take(rows, cursor, key, lambda _: cursor)

    def fresh_ids(
        self, rows: Sequence[dict[str, Any]], what: str = "a row"
    ) -> list[dict[str, Any]]:
        """:meth:`fresh` for rows carrying their ``id`` (:func:`row_id`; ``what``: what a row
        is, ``an event``)."""
        cursor = max((row_id(row, what) for row in rows), default=self._after)
        # each row's id is a whole number now
        new = self._take(rows, cursor, lambda row: row["id"], lambda row: int(row["id"]))
        while self._counts[self._after + 1]:  # ids all seen: no hole below the next one
            self._after += 1
        self._forget()
        return new

    def _take(
        self,
        rows: Sequence[Row],
        cursor: int,
        key: Callable[[Row], Hashable],
        bound: Callable[[Row], int],
    ) -> list[Row]:
        came = self._clock()
        high = max(cursor, self._reads[-1][0] if self._reads else self._after)
        self._reads.append((high, came))
        read: Counter[Hashable] = Counter()
        new: list[Row] = []
        for row in rows:
            k = key(row)
            read[k] += 1
            if read[k] > self._counts[k]:
                new.append(row)
                self._counts[k] += 1
                self._shown.append((bound(row), k))
        return new

    def _forget(self) -> None:
        """Drop the rows at or below the cursor: no read returns them again."""
        if not any(bound <= self._after for bound, _ in self._shown):
            return
        for bound, k in self._shown:
            if bound <= self._after:
                self._counts[k] -= 1
                if not self._counts[k]:
                    del self._counts[k]
        self._shown = [(bound, k) for bound, k in self._shown if bound > self._after]


def row_id(row: dict[str, Any], what: str) -> int:
    """The ``id`` of ``row`` (``what``: what it is, ``an event``), the whole number a
    follower reads on from; a :class:`~danlu.client.errors.ServerError` naming the field when
    the server sent another value (``"7"``, ``7.5``, null), which the command prints as an
    error (exit 2), never a raw ``ValueError``."""
    ident: int = needed(row, "id", WHOLE, what, "the rows after it cannot be followed")
    return ident


def content(row: dict[str, Any]) -> str:
    """A row's content as a key for :meth:`GapCursor.fresh` (rows without ids)."""
    return json.dumps(row, sort_keys=True, default=str)


def read_pages(
    read: Callable[[int], tuple[list[Row], int]], after: int, page: int = PAGE
) -> tuple[list[Row], int]:
    """Every row after ``after``, by id, however many: ``read(after_id)`` answers a page of
    at most ``page`` rows and the highest id it covers; a full page is followed by the next."""
    rows, cursor = read(after)
    found = list(rows)
    while len(rows) >= page and cursor > after:
        after = cursor
        rows, cursor = read(after)
        found += rows
    return found, cursor
