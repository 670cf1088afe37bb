"""A list that ignores ``offset`` (every request answers its first page) made
:func:`danlu.core.paging.read_pages` loop for ever: each page began on an entry already read,
so it read on, and never came to a short page. It is now a :class:`StalledListError` once the
list's head is seen to be that same page; a list that only grows at its head meanwhile is
still read to its end."""

from __future__ import annotations

import pickle

import pytest

from danlu.core.errors import DanluError, DataError
from danlu.core.paging import StalledListError, read_pages


class Deaf:
    """A list of ``size`` numbers, highest first, that answers ``limit`` entries from its
    head whatever ``offset`` is asked; it fails the test after ``most`` requests."""

    def __init__(self, size: int, most: int = 50) -> None:
        self.entries = list(range(size, 0, -1))
        self.asked: list[tuple[int, int]] = []
        self.most = most

    def fetch(self, offset: int, limit: int) -> list[int]:
        self.asked.append((offset, limit))
        assert len(self.asked) <= self.most, "read_pages did not stop"
        return self.entries[:limit]


@pytest.mark.parametrize("page", [1, 2, 3, 10])
def test_a_list_that_ignores_offset_is_refused_after_its_first_page(page: int) -> None:
    deaf = Deaf(40)
    read: list[int] = []
    with pytest.raises(StalledListError) as caught:
        for entry in read_pages(deaf.fetch, lambda n: n, page, 1000):
            read.append(entry)
    assert read == deaf.entries[: len(read)]  # what it read is yielded, once each
    assert len(read) == len(set(read)) <= page + 1
    assert caught.value.offset > 0 and caught.value.limit == page + 1
    assert "ignores 'offset'" in str(caught.value)
    assert isinstance(caught.value, DataError | DanluError)
    assert len(deaf.asked) < 10


def test_a_list_that_ignores_offset_and_limit_is_refused_too() -> None:
    fixed = list(range(50, 0, -1))
    asked: list[tuple[int, int]] = []

    def fetch(offset: int, limit: int) -> list[int]:
        asked.append((offset, limit))
        assert len(asked) < 50, "read_pages did not stop"
        return fixed

    read: list[int] = []
    with pytest.raises(StalledListError):
        read.extend(read_pages(fetch, lambda n: n, 3, 1000))
    assert read == fixed and len(asked) < 10


def test_a_list_shorter_than_a_page_that_ignores_offset_just_ends() -> None:
    deaf = Deaf(2)
    assert list(read_pages(deaf.fetch, lambda n: n, 5, 1000)) == [2, 1]
    assert deaf.asked == [(0, 5)]


def test_a_list_growing_at_its_head_by_the_step_is_not_taken_for_a_deaf_one() -> None:
    """A page of 1 with one entry submitted before each request: every page repeats the one
    before it, as a deaf list's do, but its head differs, and once the submissions stop the
    rest is read."""
    entries = list(range(20, 0, -1))
    added = [100]
    asked: list[int] = []

    def fetch(offset: int, limit: int) -> list[int]:
        asked.append(offset)
        page = entries[offset : offset + limit]
        if added[0] < 130:
            entries.insert(0, added[0])
            added[0] += 1
        return page

    read = list(read_pages(fetch, lambda n: n, 1, 1000))
    assert asked.count(0) > 2  # its head was looked at: the pages repeated
    assert set(range(1, 21)) <= set(read)
    assert len(read) == len(set(read))


def test_the_error_pickles_as_itself() -> None:
    error = pickle.loads(pickle.dumps(StalledListError(7, 4)))
    assert type(error) is StalledListError
    assert (error.offset, error.limit) == (7, 4)
    assert "offset 7" in str(error)
