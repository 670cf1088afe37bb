"""The goodput-adaptive batch's sync probes (its first ``PROBE_STEPS`` steps on several GPUs
run as two half micro-batches) are counted in the checkpoint: a run resumed on the same GPUs
goes on with the count. Before, the count was not saved and every resume ran 20 probe steps
again (other micro-batches than the uninterrupted run: the resume was not exact). A
checkpoint written on other GPUs, or before the count was kept, probes afresh, as before."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.core.errors import DataError
from danlu.train.context import TrainContext
from danlu.train.goodput import PROBE_STEPS


def _run(directory: Path) -> dt.TrainContext:
    model = tiny_model()
    return dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.01),
        global_batch_size=32,
        adaptive_batch=dt.AdaptiveBatch("goodput", 32, max_batch=64, every=10),
        lr_scaling="adascale",
        checkpoint_dir=str(directory),
        metrics_file=False,
        progress=False,
        environ={},
    )


def _checkpoint_with_probes_left(directory: Path, left: int) -> None:
    data = tiny_regression(n=64)
    x, y = data.tensors
    with _run(directory) as ctx:
        ctx.step((x[:32], y[:32]), mse_loss)
        ctx._probes_left = left  # as a multi-GPU run that probed PROBE_STEPS - left steps
        ctx.save()


def test_a_resume_on_the_same_gpus_keeps_the_probes_left(tmp_path: Path) -> None:
    _checkpoint_with_probes_left(tmp_path, 7)
    with _run(tmp_path) as resumed:
        assert resumed.step_num == 1
        assert resumed._probes_left == 7  # was PROBE_STEPS: 20 probe steps again


def test_a_resume_on_other_gpus_probes_afresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patched:  # the checkpoint's run had 2 GPUs on a node
        patched.setattr(TrainContext, "_placement", lambda self: (2,))
        _checkpoint_with_probes_left(tmp_path, 0)
    with _run(tmp_path) as resumed:
        assert resumed.step_num == 1 and resumed._probes_left == PROBE_STEPS


def test_a_checkpoint_without_the_count_still_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An older checkpoint (its data_state has no ``probes``) resumes, probing afresh."""
    saved = TrainContext.data_state

    def without_probes(self: TrainContext) -> dict[str, object]:
        state = saved(self)
        state.pop("probes", None)
        return state

    with monkeypatch.context() as patched:
        patched.setattr(TrainContext, "data_state", without_probes)
        _checkpoint_with_probes_left(tmp_path, 3)
    with _run(tmp_path) as resumed:
        assert resumed.step_num == 1 and resumed._probes_left == PROBE_STEPS


@pytest.mark.parametrize(
    "stored",
    [
        [],
        {"left": -1, "placement": [1]},
        {"left": 2.5, "placement": [1]},
        {"left": PROBE_STEPS + 1, "placement": [1]},
        {"left": True, "placement": [1]},
        {"left": 3, "placement": "1"},
        {"left": 3, "placement": [0]},
        {"left": 3},
    ],
)
def test_a_damaged_count_is_refused_by_name(stored: object) -> None:
    from danlu.train.goodput import stored_probes

    with pytest.raises(ValueError, match="probes"):
        stored_probes(stored, (1,))


def test_a_damaged_count_refuses_the_resume_before_anything_is_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    saved = TrainContext.data_state

    def damaged(self: TrainContext) -> dict[str, object]:
        return {**saved(self), "probes": {"left": "all", "placement": [1]}}

    with monkeypatch.context() as patched:
        patched.setattr(TrainContext, "data_state", damaged)
        _checkpoint_with_probes_left(tmp_path, 3)
    with pytest.raises(DataError, match="probes left 'all'"):
        _run(tmp_path)
