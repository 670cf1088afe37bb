"""Reading a changing list by offset without a gap (:func:`danlu.core.paging.read_pages`):
entries that leave it, enter it again or are added at its head between two pages."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from danlu.core.errors import SpecError
from danlu.core.paging import read_pages


class Moving:
    """A list of numbers, highest first (``GET /jobs``: newest first), filtered by ``member``;
    after each read, one change of ``changes`` (0: none, 1: one leaves, 2: one comes back,
    3: a new one at the head), its ``picks`` choosing which."""

    def __init__(self, size: int, changes: Sequence[tuple[int, int]]) -> None:
        self.member = dict.fromkeys(range(size), True)
        self.changes = list(changes)
        self.left: set[int] = set()
        self.reads = 0

    def fetch(self, offset: int, limit: int) -> list[int]:
        listed = sorted((n for n, inside in self.member.items() if inside), reverse=True)
        self.reads += 1
        if self.changes:
            self.change(*self.changes.pop(0))
        return listed[offset : offset + limit]

    def change(self, kind: int, pick: int) -> None:
        inside = [n for n, yes in self.member.items() if yes]
        outside = [n for n, yes in self.member.items() if not yes]
        if kind == 1 and inside:
            gone = inside[pick % len(inside)]
            self.member[gone] = False
            self.left.add(gone)
        elif kind == 2 and outside:
            self.member[outside[pick % len(outside)]] = True
        elif kind == 3:
            self.member[max(self.member, default=-1) + 1] = True


@settings(max_examples=300, deadline=None)
@given(
    size=st.integers(0, 60),
    page=st.integers(1, 12),
    changes=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 1000)), max_size=80),
)
def test_every_entry_in_the_list_throughout_is_read_once(
    size: int, page: int, changes: list[tuple[int, int]]
) -> None:
    moving = Moving(size, changes)
    read = list(read_pages(moving.fetch, lambda n: n, page, 1000))
    assert len(read) == len(set(read))
    assert set(range(size)) - moving.left <= set(read)
    assert moving.reads < 50 + 4 * size  # it ends, with no runaway look-backs


def test_a_page_overlaps_the_one_before_and_looks_back_when_the_list_moved_further() -> None:
    asked: list[tuple[int, int]] = []
    entries = list(range(20, 0, -1))

    def fetch(offset: int, limit: int) -> list[int]:
        asked.append((offset, limit))
        page = entries[offset : offset + limit]
        if len(asked) == 1:
            del entries[:4]  # the first page and one more leave
        return page

    assert list(read_pages(fetch, lambda n: n, 3, 1000)) == [20, 19, 18, *range(16, 0, -1)]
    # offset 2 starts on 13 (the list moved 4), so 1, then 0: from the head again
    assert asked[:3] == [(0, 3), (2, 4), (1, 5)]
    assert asked[3][0] == 0


def test_a_page_of_nothing_or_a_limit_of_one_is_refused() -> None:
    with pytest.raises(SpecError, match="page: must be at least 1"):
        list(read_pages(lambda offset, limit: [], lambda n: n, 0, 1000))
    with pytest.raises(SpecError, match="max_limit: must be at least 2"):
        list(read_pages(lambda offset, limit: [], lambda n: n, 1, 1))
