"""A run tells the server every checkpoint it committed, and only those it committed.

1. A checkpoint committed after the run's last step record (the periodic one of the last
   step, a final ``ctx.save()``, an asynchronous write that finished after the last record)
   was never said by that run: the Job's ``checkpoint_step`` learnt it only from a resumed
   run, and a job that finished never did. The run now says it in a record of its own at
   close, once the writer committed it, before the reporter's last flush.
2. On a preemption the record of the stopping step said ``checkpoint_step`` = that step
   before the preemption's checkpoint was written: when the save failed, or the process was
   killed during it, the server believed in a checkpoint that does not exist. It is said
   only once that save committed (by the same record at close).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from train_helpers import SRC, mse_loss, run_worker_ranks, tiny_model, tiny_regression

import danlu.train as dt
from danlu.train.checkpoint import CheckpointManager
from danlu.train.env import PREEMPTED_EXIT_CODE

HERE = Path(__file__).resolve().parent


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _said(records: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """(record step, checkpoint_step) of every record that says a checkpoint."""
    return [(r["step"], r["checkpoint_step"]) for r in records if "checkpoint_step" in r]


def _step_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of training steps (those with a loss)."""
    return [r for r in records if "loss" in r]


def _committed(directory: Path) -> set[int]:
    return {info.step for info in CheckpointManager(str(directory)).list_checkpoints()}


def _context(tmp_path: Path, out: Path, **kwargs: Any) -> dt.TrainContext:
    model = tiny_model()
    return dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.01),
        global_batch_size=8,
        checkpoint_dir=str(tmp_path / "ckpt"),
        metrics_file=out,
        report_interval_s=60,
        progress=False,
        **kwargs,
    )


def _fail_manifest_of(ctx: dt.TrainContext, step: int, fail: Callable[[], None]) -> None:
    """Make the commit (manifest write) of the checkpoint of ``step`` call ``fail``."""
    storage = ctx.checkpoints._manager.storage
    write = storage.write
    name = f"ckpt-{step:012d}-"

    def failing_write(path: str, data: bytes) -> None:
        if path.endswith("MANIFEST.json") and name in path:
            fail()
        write(path, data)

    storage.write = failing_write


# ---------------------------------------------------------------- 1: said at close
@pytest.mark.parametrize("async_save", [False, True], ids=["sync", "async"])
def test_the_checkpoint_of_the_last_step_is_said_before_the_run_ends(
    tmp_path: Path, async_save: bool
) -> None:
    """The periodic checkpoint of step 8, the last, comes after that step's record: a record
    of its own says it at close (before: nothing did). Every step is still one record, and
    the closing record is not one of ``ctx.history``'s steps."""
    out = tmp_path / "records.jsonl"
    x, y = tiny_regression(8).tensors
    with _context(tmp_path, out, checkpoint_every_steps=4, async_checkpoint=async_save) as ctx:
        while ctx.step_num < 8:
            ctx.step((x, y), mse_loss)
    records = _records(out)
    said = _said(records)
    assert said[-1] == (8, 8), said
    if not async_save:
        assert said == [(5, 4), (8, 8)]
    assert [r["step"] for r in _step_records(records)] == list(range(1, 9))
    closing = records[-1]
    assert set(closing) == {"step", "time", "checkpoint_step"}
    # step 8's own record comes before its checkpoint: it never says 8 (an asynchronous
    # write of step 4 that finished late may be said there)
    assert len(ctx.history) == 8 and ctx.history[-1].get("checkpoint_step") in (None, 4)


def test_a_final_save_after_the_loop_is_said(tmp_path: Path) -> None:
    """A script's own last checkpoint (``ctx.save()`` once training is done) is said."""
    out = tmp_path / "records.jsonl"
    x, y = tiny_regression(8).tensors
    with _context(tmp_path, out, async_checkpoint=True) as ctx:
        for _ in range(5):
            ctx.step((x, y), mse_loss)
        ctx.save()
    assert _said(_records(out)) == [(5, 5)]
    assert _committed(tmp_path / "ckpt") == {5}


def test_a_run_resumed_at_its_last_step_says_its_checkpoint(tmp_path: Path) -> None:
    """``fit(max_steps=4)`` resumed from the checkpoint of step 4 trains no step and reports
    no step record; it says the checkpoint it resumed from (before: no record at all)."""
    data = tiny_regression(32)

    def run(out: Path) -> dt.TrainContext:
        model = tiny_model()
        return dt.fit(
            model,
            torch.optim.SGD(model.parameters(), lr=0.01),
            data,
            mse_loss,
            epochs=10,
            global_batch_size=8,
            max_steps=4,
            checkpoint_dir=str(tmp_path / "ckpt"),
            checkpoint_every_steps=4,
            metrics_file=out,
            report_interval_s=60,
            progress=False,
        )

    run(tmp_path / "first.jsonl")
    again = run(tmp_path / "again.jsonl")
    assert again.step_num == 4
    assert _said(_records(tmp_path / "first.jsonl")) == [(4, 4)]
    assert [(r["step"], r.get("checkpoint_step")) for r in _records(tmp_path / "again.jsonl")] == [
        (4, 4)
    ]


def test_a_checkpoint_said_by_a_step_record_is_not_said_again_at_close(tmp_path: Path) -> None:
    out = tmp_path / "records.jsonl"
    x, y = tiny_regression(8).tensors
    with _context(tmp_path, out, checkpoint_every_steps=3) as ctx:
        while ctx.step_num < 5:
            ctx.step((x, y), mse_loss)
    records = _records(out)
    assert _said(records) == [(4, 3)]
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5]


# ---------------------------------------------------------------- 2: a preemption's checkpoint
def _preempted_run(ctx: dt.TrainContext) -> None:
    """Steps until the preemption asked after step 6 stops the run (at step 7)."""
    x, y = tiny_regression(8).tensors
    with ctx:
        while True:
            ctx.step((x, y), mse_loss)
            if ctx.step_num == 6:
                ctx.preemption.request()  # as the SIGTERM handler does


@pytest.mark.parametrize("async_save", [False, True], ids=["sync", "async"])
def test_a_preemptions_checkpoint_is_said_once_committed(tmp_path: Path, async_save: bool) -> None:
    """The record of step 7, taken before the preemption's save, does not say it; a record
    after the commit does, before the process exits 75. When the commit happens, no record
    written so far says it."""
    out = tmp_path / "records.jsonl"
    ctx = _context(tmp_path, out, checkpoint_every_steps=4, async_checkpoint=async_save)
    seen_at_commit: list[list[tuple[int, int]]] = []
    _fail_manifest_of(ctx, 7, lambda: seen_at_commit.append(_said(_records(out))))
    with pytest.raises(SystemExit) as exited:
        _preempted_run(ctx)
    assert exited.value.code == PREEMPTED_EXIT_CODE
    assert _committed(tmp_path / "ckpt") == {4, 7}
    records = _records(out)
    assert seen_at_commit and all(step != 7 for _, step in seen_at_commit[0])
    # step 7's own record never says checkpoint 7; an asynchronous write of step 4 that
    # finished late may be said there
    assert _step_records(records)[-1].get("checkpoint_step") in (None, 4)
    assert _said(records)[-1] == (7, 7)


@pytest.mark.parametrize("async_save", [False, True], ids=["sync", "async"])
def test_a_preemption_whose_save_fails_says_no_checkpoint(tmp_path: Path, async_save: bool) -> None:
    """The preemption's checkpoint of step 7 fails at its commit: no record says step 7
    (before: the record of step 7 did), only the periodic one of step 4 that exists."""
    out = tmp_path / "records.jsonl"
    ctx = _context(tmp_path, out, checkpoint_every_steps=4, async_checkpoint=async_save)

    def fail() -> None:
        raise OSError("the storage went away")

    _fail_manifest_of(ctx, 7, fail)
    with pytest.raises(OSError, match="went away"):
        _preempted_run(ctx)
    assert _committed(tmp_path / "ckpt") == {4}
    records = _records(out)
    assert [r["step"] for r in _step_records(records)] == list(range(1, 8))
    assert [ckpt for _, ckpt in _said(records)] == [4]


KILLED_WHILE_SAVING = """
import os, signal, sys, torch, danlu.train as dt
sys.path.insert(0, sys.argv[3])
from train_helpers import mse_loss, tiny_model, tiny_regression
model = tiny_model()
x, y = tiny_regression(8).tensors
ctx = dt.init(model, torch.optim.SGD(model.parameters(), lr=0.01), global_batch_size=8,
              checkpoint_dir=sys.argv[1], checkpoint_every_steps=4, metrics_file=sys.argv[2],
              report_interval_s=3600, progress=False)
storage = ctx.checkpoints._manager.storage
write = storage.write
def killed_at_commit(path, data):
    if path.endswith("MANIFEST.json") and "ckpt-000000000007-" in path:
        os.kill(os.getpid(), signal.SIGKILL)  # the grace ran out while the checkpoint was written
    write(path, data)
storage.write = killed_at_commit
with ctx:
    while True:
        ctx.step((x, y), mse_loss)
        if ctx.step_num == 6:
            ctx.preemption.request()
"""


@pytest.mark.slow
def test_a_preemption_killed_while_saving_says_no_checkpoint(tmp_path: Path) -> None:
    """SIGKILL while the preemption's checkpoint of step 7 is written: the records the
    process left (the save wrote them to the file as it began) say only step 4's."""
    ckpt, out = tmp_path / "ckpt", tmp_path / "records.jsonl"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(SRC))
    done = subprocess.run(
        [sys.executable, "-c", KILLED_WHILE_SAVING, str(ckpt), str(out), str(HERE)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    assert _committed(ckpt) == {4}
    records = _records(out)
    assert [r["step"] for r in records] == list(range(1, 8))
    assert _said(records) == [(5, 4)]


@pytest.mark.slow
def test_a_distributed_preemption_is_said_by_the_chief_once_committed(tmp_path: Path) -> None:
    """Two gloo ranks, only rank 1 signalled after step 3: both stop at step 4, the chief
    checkpoints it, and the chief's records say it once committed, in a record after that of
    step 4 (before: no record said it, the chief not having been signalled itself)."""
    out = tmp_path / "ckpt_close"
    run_worker_ranks(
        HERE / "ckpt_close_worker.py",
        2,
        [str(out)],
        timeout=180,
        GLOO_SOCKET_IFNAME="lo",
        CUDA_VISIBLE_DEVICES="",
    )
    exits = [json.loads(Path(f"{out}.{rank}").read_text()) for rank in (0, 1)]
    assert exits == [{"code": PREEMPTED_EXIT_CODE, "step": 4}] * 2
    assert _committed(Path(f"{out}.ckpt")) == {4}
    records = _records(Path(f"{out}.jsonl"))
    assert [r["step"] for r in _step_records(records)] == [1, 2, 3, 4]
    assert _said(records) == [(4, 4)]
    assert "loss" not in records[-1]
