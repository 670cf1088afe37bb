"""A run that tunes its own batch (an adaptive batch) resumes exactly under the
server, which launches every run with ``DANLU_GLOBAL_BATCH_SIZE``: the launch batch replaces
the restored one only when the scheduler asks a different batch than the run had followed
when it checkpointed (a rebatch or resize while the job was down).

Each case preempts a run at step :data:`STOP` and resumes it in the same checkpoint
directory; the exact-resume cases compare every step's loss, LR and global batch with an
uninterrupted run's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from train_helpers import mse_loss, tiny_model

import danlu.train as dt
from danlu.train.context import TrainContext

STOP = 8
"""The step at which the interrupted run is preempted (a periodic checkpoint is at 5): both
adaptive batches have grown by then."""
SUBMITTED = 8
"""The script's (and the job's submitted) global batch."""
Record = tuple[int, float, float, int]
"""(step, loss, lr, global batch) of one step."""


def _adaptive(mode: str) -> dt.AdaptiveBatch:
    if mode == "schedule":
        return dt.AdaptiveBatch("schedule", SUBMITTED, total_steps=10, alpha=1.0, max_batch=32)
    # "gns": grows towards the noise scale, measured on every step (gns_every=1)
    return dt.AdaptiveBatch("gns", SUBMITTED, max_batch=32)


def _noisy_data() -> torch.utils.data.TensorDataset:
    """103 samples whose targets are mostly noise: the gradient noise scale is large enough
    for a ``"gns"`` batch to grow within :data:`STOP` steps."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(103, 8, generator=g)
    y = 0.1 * x[:, :1] + torch.randn(103, 1, generator=g)
    return torch.utils.data.TensorDataset(x, y)


def _run(
    directory: Path,
    mode: str,
    environ: dict[str, str],
    *,
    stop_at: int | None = None,
) -> tuple[list[Record], TrainContext]:
    """Train 3 epochs (resuming from ``directory``), preempted at step ``stop_at`` when given.
    Returns every step's record in the context's history (a resumed run's holds the
    checkpoint's before its own), and the context."""
    data = _noisy_data()
    model = tiny_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    kw: dict[str, Any] = {"gns_every": 1} if mode == "gns" else {}
    ctx = dt.init(
        model,
        opt,
        global_batch_size=SUBMITTED,
        micro_batch_size=16,
        warmup_steps=4,
        dataset_size=len(data),
        checkpoint_dir=str(directory),
        checkpoint_every_steps=5,
        metrics_file=False,
        adaptive_batch=_adaptive(mode),
        environ=environ,
        **kw,
    )
    try:
        with ctx:
            for _ in ctx.epochs(3):
                for batch in ctx.batches(data):
                    if stop_at is not None and ctx.step_num + 1 == stop_at:
                        ctx.preemption.request()  # checkpoints and exits after this step
                    ctx.step(batch, mse_loss)
    except SystemExit as stop:
        assert stop.code == dt.PREEMPTED_EXIT_CODE
    records = [(h["step"], h["loss"], h["lr"], h["global_batch"]) for h in ctx.history]
    return records, ctx


def _env(batch: int | None) -> dict[str, str]:
    return {} if batch is None else {"DANLU_GLOBAL_BATCH_SIZE": str(batch)}


@pytest.mark.parametrize("mode", ["schedule", "gns"], ids=["schedule", "gns"])
def test_a_resume_at_the_submitted_launch_batch_keeps_the_tuned_batch(
    tmp_path: Path, mode: str
) -> None:
    environ = _env(SUBMITTED)
    whole, _ = _run(tmp_path / "a", mode, environ)
    first, _ = _run(tmp_path / "b", mode, environ, stop_at=STOP)
    assert first[-1][0] == STOP
    assert whole[STOP][3] != SUBMITTED  # the run had tuned its batch by the checkpoint
    resumed, _ = _run(tmp_path / "b", mode, environ)
    assert resumed[:STOP] == first  # the checkpoint's history, then this run's steps
    assert [r[0] for r in resumed] == [r[0] for r in whole]
    different = [(a, b) for a, b in zip(whole, resumed, strict=True) if a != b]
    assert not different, f"the resumed run differs from the uninterrupted one: {different[:3]}"


def test_a_resume_at_another_launch_batch_adopts_it(tmp_path: Path) -> None:
    first, _ = _run(tmp_path, "gns", _env(SUBMITTED), stop_at=STOP)
    assert first[-1][0] == STOP
    resumed, _ = _run(tmp_path, "gns", _env(24))  # a policy rebatch while the job was down
    after = resumed[STOP]
    assert after[0] == STOP + 1
    assert after[3] == 24  # the first step after the resume trained the scheduler's batch


def test_a_resume_of_a_run_launched_without_a_scheduler_batch_adopts_the_launch_batch(
    tmp_path: Path,
) -> None:
    first, _ = _run(tmp_path, "schedule", {}, stop_at=STOP)
    assert first[-1][3] != SUBMITTED  # the schedule grew the batch
    resumed, _ = _run(tmp_path, "schedule", _env(SUBMITTED))
    assert resumed[STOP][3] == SUBMITTED  # the scheduler's first word holds over the checkpoint


def test_a_checkpoint_written_before_it_held_the_scheduler_batch_adopts_the_launch_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = TrainContext.data_state

    def without_scheduler_batch(self: TrainContext) -> dict[str, Any]:
        state = original(self)
        state.pop("scheduler_batch", None)  # as an older danlu wrote it
        return state

    monkeypatch.setattr(TrainContext, "data_state", without_scheduler_batch)
    first, _ = _run(tmp_path, "schedule", _env(SUBMITTED), stop_at=STOP)
    assert first[-1][3] != SUBMITTED
    resumed, _ = _run(tmp_path, "schedule", _env(SUBMITTED))
    assert resumed[STOP][3] == SUBMITTED  # as before: the launch batch holds


def _fit(directory: Path, environ: dict[str, str], *, stop_at: int | None = None) -> list[Record]:
    """``fit()`` the schedule run for 3 epochs (resuming from ``directory``), preempted at
    step ``stop_at`` when given; returns its context's records (see :func:`_run`)."""
    model = tiny_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    contexts: list[TrainContext] = []
    step = TrainContext.step

    def step_seen(self: TrainContext, data: Any, loss_fn: Any) -> Any:
        contexts.append(self)
        if stop_at is not None and self.step_num + 1 == stop_at:
            self.preemption.request()
        return step(self, data, loss_fn)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TrainContext, "step", step_seen)
        try:
            dt.fit(
                model,
                opt,
                _noisy_data(),
                mse_loss,
                epochs=3,
                global_batch_size=SUBMITTED,
                micro_batch_size=16,
                warmup_steps=4,
                checkpoint_dir=str(directory),
                checkpoint_every_steps=5,
                metrics_file=False,
                adaptive_batch=_adaptive("schedule"),
                environ=environ,
            )
        except SystemExit as stop:
            assert stop.code == dt.PREEMPTED_EXIT_CODE
    assert len({id(c) for c in contexts}) == 1
    return [(h["step"], h["loss"], h["lr"], h["global_batch"]) for h in contexts[-1].history]


def test_fit_resumed_at_the_submitted_launch_batch_matches_an_uninterrupted_fit(
    tmp_path: Path,
) -> None:
    environ = _env(SUBMITTED)
    whole = _fit(tmp_path / "a", environ)
    first = _fit(tmp_path / "b", environ, stop_at=STOP)
    assert first[-1][0] == STOP
    assert whole[STOP][3] != SUBMITTED  # the schedule had grown the batch by the checkpoint
    resumed = _fit(tmp_path / "b", environ)
    assert resumed[:STOP] == first
    different = [(a, b) for a, b in zip(whole, resumed, strict=True) if a != b]
    assert not different, f"the resumed fit differs from the uninterrupted one: {different[:3]}"
