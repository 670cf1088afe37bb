"""review89: a list that grew at its head and lost that entry again between two pages is not
taken for one that ignores ``offset`` (:func:`danlu.core.paging.read_pages`)."""

from __future__ import annotations

import pytest

from danlu.core.paging import StalledListError, read_pages


def test_a_head_that_came_and_went_is_no_stalled_list() -> None:
    # newest first: 1, 0. After the second request a job 2 is submitted (the head); after
    # the third it leaves the filter (it started). The third page (offset 1) then repeats the
    # second, and the head, read after 2 left, is that page too: it was StalledListError.
    entries = [1, 0]
    asked: list[tuple[int, int]] = []

    def fetch(offset: int, limit: int) -> list[int]:
        asked.append((offset, limit))
        assert len(asked) < 20, "read_pages did not stop"
        page = entries[offset : offset + limit]
        if len(asked) == 2:
            entries.insert(0, 2)
        elif len(asked) == 3:
            entries.remove(2)
        return page

    assert list(read_pages(fetch, lambda n: n, 1, 1000)) == [1, 0]


def test_a_list_that_ignores_offset_is_still_refused() -> None:
    def deaf(offset: int, limit: int) -> list[int]:
        return [3, 2, 1][:limit]

    with pytest.raises(StalledListError):
        list(read_pages(deaf, lambda n: n, 2, 3))
