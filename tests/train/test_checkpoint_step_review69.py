"""danlu.train tells the server its checkpoints: a metric record carries ``checkpoint_step``
once the checkpoint of that step is complete (the server keeps the largest as the Job's
``checkpoint_step``), a preemption's checkpoint is said before the process exits, and a resumed
run says the checkpoint it resumed from. Before, no record ever carried it, so the Job's
``checkpoint_step`` stayed null however many checkpoints a danlu.train job wrote.

Also the checkpoint manager's retention: a checkpoint directory without a manifest that this
manager left (its save failed) goes at the next retention.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.train.checkpoint import CheckpointManager
from danlu.train.env import PREEMPTED_EXIT_CODE
from danlu.train.state import capture_state


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _said(records: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """(record step, checkpoint_step) of every record that says a checkpoint."""
    return [(r["step"], r["checkpoint_step"]) for r in records if "checkpoint_step" in r]


def _committed_steps(directory: Path) -> set[int]:
    return {info.step for info in CheckpointManager(str(directory)).list_checkpoints()}


def _train(
    tmp_path: Path, steps: int, *, every: int, async_save: bool = False, settle: bool = False
) -> Path:
    """Train ``steps`` steps of a tiny model checkpointing every ``every`` steps; the metric
    records go to the JSONL file returned. ``settle``: wait for each (asynchronous) save to
    finish before the next step, so that the next record finds it complete."""
    out = tmp_path / f"records-{steps}-{every}-{async_save}.jsonl"
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = tiny_regression(64)
    with dt.init(
        model,
        opt,
        global_batch_size=4,
        dataset_size=len(data),
        checkpoint_dir=str(tmp_path / "ckpt"),
        checkpoint_every_steps=every,
        async_checkpoint=async_save,
        metrics_file=out,
        report_interval_s=60,
        progress=False,
    ) as ctx:
        for _ in ctx.epochs(10):
            for batch in ctx.batches(data):
                ctx.step(batch, mse_loss)
                if settle:
                    ctx.checkpoints.wait()
                if ctx.step_num >= steps:
                    break
            if ctx.step_num >= steps:
                break
    return out


@pytest.mark.parametrize("async_save", [False, True], ids=["sync", "async"])
def test_each_checkpoint_is_said_by_the_next_record(tmp_path: Path, async_save: bool) -> None:
    """Checkpoints of steps 3, 6 and 9 in a run of 10 steps, each complete before the next
    step (a synchronous save is; an asynchronous one is waited for here): each is said once,
    by the next step's record (a step's own record is taken before its checkpoint)."""
    records = _records(_train(tmp_path, 10, every=3, async_save=async_save, settle=True))
    assert _said(records) == [(4, 3), (7, 6), (10, 9)]
    assert [r["step"] for r in records] == list(range(1, 11))


def test_asynchronous_checkpoints_are_said_in_order_and_after_their_step(tmp_path: Path) -> None:
    """Unsettled asynchronous saves: whichever are said come in order, each after its step
    (one that finished only after the next began is not said: the next is)."""
    said = _said(_records(_train(tmp_path, 10, every=3, async_save=True)))
    checkpoints = [ckpt for _, ckpt in said]
    assert checkpoints == sorted(set(checkpoints)) and set(checkpoints) <= {3, 6, 9}
    assert all(step > ckpt for step, ckpt in said)


def test_an_asynchronous_checkpoint_is_said_only_once_written(tmp_path: Path) -> None:
    """The checkpoint of step 2, written in the background, is held before its manifest: the
    records of steps 3 and 4 do not say it; the first record after its write finished does."""
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = tiny_regression(8).tensors
    out = tmp_path / "records.jsonl"
    ctx = dt.init(
        model,
        opt,
        global_batch_size=8,
        checkpoint_dir=str(tmp_path / "ckpt"),
        checkpoint_every_steps=2,
        async_checkpoint=True,
        metrics_file=out,
        report_interval_s=60,
        progress=False,
    )
    storage = ctx.checkpoints._manager.storage
    write, gate = storage.write, threading.Event()

    def held_write(path: str, data: bytes) -> None:
        if path.endswith("MANIFEST.json"):
            assert gate.wait(60), "the test never released the manifest"
        write(path, data)

    storage.write = held_write
    try:
        for _ in range(4):  # saves step 2 (held), then steps 3 and 4 (4: waits at save)
            ctx.step((x, y), mse_loss)
            if ctx.step_num == 3:
                assert _committed_steps(tmp_path / "ckpt") == set()
                gate.set()
                ctx.checkpoints.wait()
        ctx.step((x, y), mse_loss)  # step 5: step 4's save may still be in flight
        ctx.checkpoints.wait()
        ctx.step((x, y), mse_loss)  # step 6
    finally:
        gate.set()
        ctx.close()
    said = _said(_records(out))
    assert said[0] == (4, 2)  # not (3, 2): step 3's record came while it was being written
    assert said[1:-1] in ([(5, 4)], [(6, 4)])  # step 4's: as soon as its write finished
    assert said[-1] == (6, 6)  # step 6's, written after the last record: said at close


PREEMPTED = """
import sys, torch
import danlu.train as dt
sys.path.insert(0, {helpers!r})
from train_helpers import mse_loss, tiny_model, tiny_regression
model = tiny_model()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = tiny_regression(64)
with dt.init(model, opt, global_batch_size=4, dataset_size=len(data), checkpoint_dir={ckpt!r},
             checkpoint_every_steps=4, async_checkpoint={async_save}, metrics_file={out!r},
             report_interval_s=60, progress=False) as ctx:
    for _ in ctx.epochs(10):
        for batch in ctx.batches(data):
            ctx.step(batch, mse_loss)
            if ctx.step_num == 6:
                ctx.preemption.request()  # as the SIGTERM handler does
"""


@pytest.mark.parametrize("async_save", [False, True], ids=["sync", "async"])
def test_a_preemptions_checkpoint_is_said_before_the_process_exits(
    tmp_path: Path, async_save: bool
) -> None:
    """Asked to stop after step 6, the run checkpoints at the next boundary, step 7, and
    exits 75: a record after that of step 7, flushed before it exits, says that checkpoint
    once it is committed (test_checkpoint_close_review70.py: not before)."""
    helpers = str(Path(__file__).parent)
    out, ckpt = tmp_path / "records.jsonl", tmp_path / "ckpt"
    script = PREEMPTED.format(helpers=helpers, ckpt=str(ckpt), out=str(out), async_save=async_save)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DANLU_")}
    env["PYTHONPATH"] = str(Path(__file__).parents[2] / "src")
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == PREEMPTED_EXIT_CODE, done.stderr
    assert max(_committed_steps(ckpt)) == 7
    said = _said(_records(out))
    assert said[-1] == (7, 7)
    # the periodic checkpoint of step 4: said by the next record when synchronous; written
    # in the background, perhaps only once the preemption's save waited for it (then the
    # record of step 7 says it, and the record flushed at exit says step 7's)
    if async_save:
        assert said[:-1] in ([], [(5, 4)], [(6, 4)], [(7, 4)])
    else:
        assert said[:-1] == [(5, 4)]


def test_a_resumed_run_says_the_checkpoint_it_resumed_from(tmp_path: Path) -> None:
    """A run resumed from the checkpoint of step 6 says it in its first record (the run that
    wrote it may have died before its next record was shipped; here it said it at close)."""
    first = _records(_train(tmp_path, 6, every=6))
    assert _said(first) == [(6, 6)]
    again = _records(_train(tmp_path, 8, every=100))
    fresh = [r for r in again if r["step"] > 6]
    assert fresh[0]["step"] == 7 and fresh[0].get("checkpoint_step") == 6
    assert all("checkpoint_step" not in r for r in fresh[1:])


def test_the_manager_says_its_last_committed_step(tmp_path: Path) -> None:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for async_save in (False, True):
        mgr = CheckpointManager(str(tmp_path / str(async_save)), async_save=async_save)
        assert mgr.committed_step is None
        mgr.save(3, capture_state(model, opt, step=3))
        mgr.wait()
        assert mgr.committed_step == 3
        mgr.save(5, capture_state(model, opt, step=5))
        mgr.close()
        assert mgr.committed_step == 5


def test_retention_removes_an_unfinished_checkpoint_this_manager_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save whose removal of its own unfinished directory failed leaves it behind: the next
    retention removes it."""
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    mgr = CheckpointManager(str(tmp_path), keep_last=1)
    mgr.save(1, capture_state(model, opt, step=1))
    original_write, original_remove = mgr.storage.write, mgr.storage.remove_dir

    def failing_write(path: str, data: bytes) -> None:
        if path.endswith("MANIFEST.json"):
            raise OSError("the storage went away")
        original_write(path, data)

    monkeypatch.setattr(mgr.storage, "write", failing_write)
    monkeypatch.setattr(mgr.storage, "remove_dir", lambda name: None)
    with pytest.raises(OSError, match="went away"):
        mgr.save(2, capture_state(model, opt, step=2))
    monkeypatch.setattr(mgr.storage, "write", original_write)
    monkeypatch.setattr(mgr.storage, "remove_dir", original_remove)
    left = [p for p in tmp_path.iterdir() if p.name.startswith("ckpt-000000000002")]
    assert len(left) == 1 and not (left[0] / "MANIFEST.json").exists()
    mgr.save(3, capture_state(model, opt, step=3))
    assert not left[0].exists()
    assert _committed_steps(tmp_path) == {3}
