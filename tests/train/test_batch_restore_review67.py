"""A restored micro-batch after a resize: only a cap learned from an OOM, or this
launch's own micro-batch (``micro_batch_size=``, ``DANLU_BATCH_SIZE``), limits it.

Before, the checkpoint's micro-batch capped the relaunch's whatever its origin: a job at global
batch 12 on 3 ranks (micro 4, the whole local batch) kept micro 4 after shrinking to 2 ranks
(accumulation 2, even with ``micro_batch_size=6``) and to 1 (accumulation 3), where a fresh run
trains 6 and 12 samples at once. A relaunch could only lower the micro-batch.
"""

from __future__ import annotations

from typing import Any

import pytest

from danlu.train.batch import BatchController


def _saved(world: int, micro: int | None = None, ooms: int = 0) -> dict[str, Any]:
    """The batch state of a run at global batch 12 on ``world`` ranks after ``ooms`` OOMs."""
    batch = BatchController(12, world, micro)
    for _ in range(ooms):
        batch.on_oom()
    return batch.state_dict()


def _restored(state: dict[str, Any], world: int, micro: int | None = None) -> BatchController:
    """A relaunch on ``world`` ranks (given ``micro``) that restores ``state``."""
    batch = BatchController(12, world, micro)
    batch.load_state_dict(state)
    return batch


# (case id, saved at world/micro/ooms, relaunched at world/micro, expected micro, accumulation)
CASES = [
    ("shrink-3-to-2", (3, None, 0), (2, None), 6, 1),
    ("shrink-3-to-2-micro-6", (3, None, 0), (2, 6), 6, 1),
    ("shrink-3-to-1", (3, None, 0), (1, None), 12, 1),
    ("shrink-2-micro-6-to-1", (2, 6, 0), (1, None), 12, 1),
    ("grow-1-to-3", (1, None, 0), (3, None), 4, 1),
    ("explicit-2-then-8", (1, 2, 0), (1, 8), 8, 2),
    ("oom-cap-same-size", (2, None, 1), (2, None), 3, 2),
    ("oom-cap-shrink", (2, None, 1), (1, None), 3, 4),
    ("oom-cap-over-larger-micro", (2, None, 1), (1, 12), 3, 4),
    ("smaller-micro-under-oom-cap", (2, None, 1), (1, 2), 2, 6),
]


@pytest.mark.parametrize(
    ("saved", "relaunch", "micro", "accumulation"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_the_restored_micro_batch_follows_the_relaunch_unless_an_oom_capped_it(
    saved: tuple[int, int | None, int],
    relaunch: tuple[int, int | None],
    micro: int,
    accumulation: int,
) -> None:
    batch = _restored(_saved(*saved), *relaunch)
    assert (batch.micro, batch.accumulation) == (micro, accumulation)
    assert batch.global_batch == 12


def test_an_oom_cap_survives_every_restart_and_a_lower_launch_does_not_lower_it() -> None:
    """The learned cap is kept in the checkpoint as learned: a relaunch with a smaller
    micro-batch uses that one, and the next relaunch without one is back at the OOM's cap."""
    first = _restored(_saved(2, None, 1), 2)
    assert (first.micro, first.oom_cap, first.oom_count) == (3, 3, 1)
    lower = _restored(first.state_dict(), 2, 2)
    assert (lower.micro, lower.oom_cap) == (2, 3)
    again = _restored(lower.state_dict(), 1)
    assert (again.micro, again.accumulation, again.oom_cap) == (3, 4, 3)
    assert not again.follows_local  # a launch batch does not lift a learned cap


def test_growth_while_running_keeps_the_largest_micro_batch_tried_across_a_restart() -> None:
    """An adaptive batch grown from 12 to 24 on one rank trained micro-batches of 12; its
    restart at the same size does too (24 at once was never tried)."""
    batch = BatchController(12, 1)
    batch.set_global(24)
    assert (batch.micro, batch.accumulation) == (12, 2)
    restored = _restored(batch.state_dict(), 1)
    assert (restored.global_batch, restored.micro, restored.accumulation) == (24, 12, 2)


def test_a_launch_batch_restored_at_the_same_size_keeps_its_micro_batch() -> None:
    """A run launched at ``DANLU_GLOBAL_BATCH_SIZE=32`` over a script's 12 trains 32 at once;
    restored at the same size (the scheduler asks the same batch), it still does."""
    batch = BatchController(12, 1)
    batch.set_global(32, launch=True)
    restored = _restored(batch.state_dict(), 1)
    assert (restored.global_batch, restored.micro, restored.accumulation) == (32, 32, 1)


# checkpoints written before the fix: no ``oom_cap`` (nor, older, ``follows_local``,
# ``micro_cap``, ``oom_count``); (case id, state, relaunch world, expected micro, accumulation)
OLD = [
    ("followed-local", {"global_batch": 12, "micro": 4, "micro_cap": 4, "oom_count": 0}, 1, 12, 1),
    ("oom-capped", {"global_batch": 12, "micro": 2, "micro_cap": 2, "oom_count": 1}, 1, 2, 6),
    ("oldest", {"global_batch": 12, "micro": 4}, 1, 12, 1),
    (
        "follows-flag",
        {"global_batch": 12, "micro": 4, "micro_cap": 4, "oom_count": 0, "follows_local": True},
        2,
        6,
        1,
    ),
]


@pytest.mark.parametrize(
    ("state", "world", "micro", "accumulation"),
    [case[1:] for case in OLD],
    ids=[case[0] for case in OLD],
)
def test_a_checkpoint_written_before_still_loads(
    state: dict[str, Any], world: int, micro: int, accumulation: int
) -> None:
    """An older checkpoint's cap is an OOM's exactly when it counted one."""
    batch = _restored(state, world)
    assert (batch.micro, batch.accumulation) == (micro, accumulation)
    assert batch.oom_cap == (state["micro_cap"] if state.get("oom_count") else None)
