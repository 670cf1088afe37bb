"""The danlu policy's hold rules on their own (:mod:`danlu.sched.policies.danlu_holds`)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from danlu.sched.policies.danlu_holds import STARVE_SLICES, over_budget, promotion_holds

jobs = st.lists(st.tuples(st.booleans(), st.integers(0, 5)), max_size=40)


@given(jobs, st.integers(1, 10))
def test_the_move_budget_leaves_open_the_last_ranked(
    rows: list[tuple[bool, int]], budget: int
) -> None:
    held = np.array([h for h, _ in rows], dtype=bool)
    keys = np.array([float(k) for _, k in rows])
    extra = over_budget(held, keys, budget)
    assert not (extra & held).any()  # only jobs past their hold are held for the round
    still_open = np.flatnonzero(~(held | extra))
    was_open = np.flatnonzero(~held)
    assert len(still_open) == min(budget, len(was_open))
    if len(still_open) < len(was_open):
        closed = np.flatnonzero(extra)
        # every job left open ranks after every job held for the round (ties: later index)
        assert min((keys[i], i) for i in still_open) > max((keys[i], i) for i in closed)


def test_promotion_holds_count_the_gpus_within_the_hold_and_its_last_slice() -> None:
    hold, now = 1000.0, 5000.0
    last_slice = now + hold * (1.0 - 1.0 / STARVE_SLICES)  # promoted after it: lately
    until = np.array([now - 1.0, now + 10.0, last_slice - 1.0, last_slice + 1.0, now + hold])
    gpus = np.array([16, 8, 4, 2, 1], dtype=np.int64)
    within, lately = promotion_holds(until, gpus, now, hold)
    assert within == 8 + 4 + 2 + 1  # the first hold is over
    assert lately == 2 + 1
