"""Resuming a ``danlu.train`` run with other data or batch settings.

- Another ``dataset_size``: before, a bare ``ConfigError`` came from the sampler's
  ``load_state_dict`` after the model and the optimizer had been loaded; now the
  compatibility check refuses it with an ``IncompatibleCheckpointError`` before anything is.
- ``shuffle`` and ``drop_last`` were not in the checkpoint, so another ``shuffle`` in the
  middle of an epoch repeated and skipped samples; now they are, and another ``shuffle`` is
  refused in the middle of an epoch and taken at an epoch's end (another ``drop_last``, which
  only decides whether the last partial batch is trained, is taken). Checkpoints without them
  still load.
- Another ``global_batch_size`` was ignored without a word (the checkpoint's is used); now a
  WARNING names both values and the one used.
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path

import pytest
import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.core.errors import ConfigError
from danlu.train.context import TrainContext
from danlu.train.data import ElasticSampler
from danlu.train.state import IncompatibleCheckpointError, capture_state, check_compatible

N = 64
"""Samples in the dataset of the run that writes the checkpoint."""


def _init(
    directory: Path, *, n: int | None = N, global_batch_size: int = 4, seed: int = 0, **kw: object
) -> TrainContext:
    """A context over a tiny model (``seed``: its initial weights) that does not resume by
    itself (``resume=False``: the tests call ``restore()``, and ``close`` cleans up)."""
    model = tiny_model(seed=seed)
    return dt.init(
        model,
        torch.optim.Adam(model.parameters(), lr=0.01),
        global_batch_size=global_batch_size,
        dataset_size=n,
        checkpoint_dir=str(directory),
        resume=False,
        metrics_file=False,
        progress=False,
        environ={},
        **kw,  # type: ignore[arg-type]
    )


def _write(directory: Path, steps: int, **kw: object) -> None:
    """Train ``steps`` steps of global batch 4 over ``N`` samples and checkpoint the last."""
    data = tiny_regression(N)
    with _init(directory, **kw) as ctx:
        for _ in ctx.epochs(steps * 4 // N + 1):
            for batch in ctx.batches(data):
                ctx.step(batch, mse_loss)
                if ctx.step_num == steps:
                    break
            if ctx.step_num == steps:
                break
        ctx.save()


def _weights(ctx: TrainContext) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in ctx.model.state_dict().items()}


def test_another_dataset_size_is_refused_before_anything_is_loaded(tmp_path: Path) -> None:
    _write(tmp_path, 3)
    with _init(tmp_path, n=48, seed=1) as ctx:
        before = _weights(ctx)
        with pytest.raises(IncompatibleCheckpointError) as caught:
            ctx.restore()
        message = str(caught.value)
        assert "dataset_size=64 in the checkpoint, 48 now" in message
        assert "same dataset" in message and "checkpoint_dir" in message
        after = _weights(ctx)
        assert all(torch.equal(before[k], after[k]) for k in before)  # the model is not loaded
        assert not ctx.optimizer.state  # nor is the optimizer (Adam's moments)
        assert ctx.step_num == 0


def test_the_same_dataset_size_resumes(tmp_path: Path) -> None:
    _write(tmp_path, 3)
    with _init(tmp_path, seed=1) as ctx:
        assert ctx.restore()
        assert (ctx.step_num, ctx.sampler.epoch, ctx.sampler.offset) == (3, 0, 12)  # type: ignore[union-attr]


def test_shuffle_and_drop_last_are_in_the_checkpoint() -> None:
    state = ElasticSampler(N, shuffle=False, drop_last=True).state_dict()
    assert (state["shuffle"], state["drop_last"]) == (False, True)


@pytest.mark.parametrize(("saved", "now"), [(True, False), (False, True)])
def test_another_order_in_the_middle_of_an_epoch_is_refused(
    tmp_path: Path, saved: bool, now: bool
) -> None:
    _write(tmp_path, 3, shuffle=saved)
    with _init(tmp_path, seed=1, shuffle=now) as ctx:
        before = _weights(ctx)
        with pytest.raises(IncompatibleCheckpointError, match=f"shuffle={saved} in the checkpoint"):
            ctx.restore()
        after = _weights(ctx)
        assert all(torch.equal(before[k], after[k]) for k in before)
        assert ctx.sampler is not None and ctx.sampler.offset == 0


def test_another_drop_last_in_the_middle_of_an_epoch_is_taken(tmp_path: Path) -> None:
    """It only decides whether the epoch's last partial batch is trained: a run that failed
    on a one-sample last batch may resume with ``drop_last=True``."""
    _write(tmp_path, 3, drop_last=False)
    with _init(tmp_path, seed=1, drop_last=True) as ctx:
        assert ctx.restore()
        assert ctx.sampler is not None
        assert (ctx.sampler.offset, ctx.sampler.drop_last) == (12, True)


def test_another_shuffle_at_an_epoch_boundary_takes_effect_in_the_next_epoch(
    tmp_path: Path,
) -> None:
    _write(tmp_path, N // 4, shuffle=True)  # the checkpoint ends epoch 0
    data = tiny_regression(N)
    with _init(tmp_path, seed=1, shuffle=False) as ctx:
        assert ctx.restore()
        assert ctx.sampler is not None and ctx.sampler.epoch_done
        seen: dict[int, list[int]] = {}
        for epoch in ctx.epochs(2):  # epoch 0 once more, done: no batch
            for batch in ctx.batches(data):
                assert ctx.current_batch is not None
                seen.setdefault(epoch, []).extend(ctx.current_batch.indices)
                ctx.step(batch, mse_loss)
        assert seen == {1: list(range(N))}  # the new order: shuffle=False


def test_a_checkpoint_without_shuffle_or_drop_last_still_loads(tmp_path: Path) -> None:
    """Written before they were saved: nothing to compare, the live values hold."""
    old = {"epoch": 0, "offset": 12, "seed": 0, "n": N}
    sampler = ElasticSampler(N, shuffle=False, drop_last=True)
    sampler.load_state_dict(old)
    assert (sampler.offset, sampler.shuffle, sampler.drop_last) == (12, False, True)
    model = torch.nn.Linear(3, 2)
    state = capture_state(model, data_state={"sampler": old})
    check_compatible(state, torch.nn.Linear(3, 2), sampler=ElasticSampler(N, shuffle=False))


def test_a_sampler_state_of_another_size_is_a_config_error_naming_dataset_size() -> None:
    """Loaded directly (a script's own loop), another size is still refused, by name."""
    with pytest.raises(ConfigError, match="dataset_size=64 in the checkpoint, 48 now"):
        ElasticSampler(48).load_state_dict(ElasticSampler(N).state_dict())


def test_another_global_batch_size_is_a_warning_and_the_checkpoints_is_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _write(tmp_path, 3)
    with _init(tmp_path, seed=1, global_batch_size=8) as ctx:
        with caplog.at_level(logging.WARNING, logger="danlu.train"):
            assert ctx.restore()
        assert ctx.batch.global_batch == 4 and ctx.batch.base_global_batch == 4
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    said = [w for w in warnings if "global_batch_size" in w]
    assert len(said) == 1, warnings
    assert "global_batch_size=8" in said[0] and "checkpoint's global_batch_size=4" in said[0]
    assert "4 is used" in said[0]


def test_the_same_global_batch_size_says_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _write(tmp_path, 3)
    with _init(tmp_path, seed=1) as ctx, caplog.at_level(logging.WARNING, logger="danlu.train"):
        assert ctx.restore()
    assert not [r for r in caplog.records if "global_batch_size" in r.getMessage()]


def test_init_that_cannot_resume_leaves_nothing_behind(tmp_path: Path) -> None:
    """``dt.init`` refused the checkpoint but left its context unclosed: its reporter thread
    ran on and its SIGTERM handler stayed installed in the script that caught the error."""
    _write(tmp_path, 3)
    handler = signal.getsignal(signal.SIGTERM)
    threads = set(threading.enumerate())
    model = tiny_model(seed=1)
    with pytest.raises(IncompatibleCheckpointError, match="dataset_size=64"):
        dt.init(
            model,
            torch.optim.Adam(model.parameters(), lr=0.01),
            global_batch_size=4,
            dataset_size=48,
            checkpoint_dir=str(tmp_path),
            metrics_file=False,
            progress=False,
            environ={},
        )
    assert signal.getsignal(signal.SIGTERM) is handler
    assert [t.name for t in set(threading.enumerate()) - threads if t.is_alive()] == []


def test_a_data_position_on_one_side_only_is_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A run with ``dataset_size`` over a checkpoint written without one started its data
    at epoch 0 without a word; one without ``dataset_size`` dropped the checkpoint's
    position without a word (it keeps it now for the sampler ``ctx.batches`` builds: the
    WARNING comes when a step trains on a batch of the script's own instead)."""
    _write(tmp_path / "with", 3)
    with (
        _init(tmp_path / "with", seed=1, n=None) as ctx,
        caplog.at_level(logging.WARNING, logger="danlu.train"),
    ):
        assert ctx.restore()
        assert not [r for r in caplog.records if "data position" in r.getMessage()]
        ctx.step(tiny_regression(N)[0:4], mse_loss)
        ctx.step(tiny_regression(N)[4:8], mse_loss)
    said = [r.getMessage() for r in caplog.records if "data position" in r.getMessage()]
    assert len(said) == 1 and "epoch 0, 12 samples" in said[0] and "64" in said[0], said
    caplog.clear()
    model = tiny_model(seed=0)
    plain = dt.init(
        model,
        torch.optim.Adam(model.parameters(), lr=0.01),
        global_batch_size=4,
        checkpoint_dir=str(tmp_path / "without"),
        resume=False,
        metrics_file=False,
        progress=False,
        environ={},
    )
    with plain:
        plain.step(tiny_regression(N)[0:4], mse_loss)
        plain.save()
    with _init(tmp_path / "without", seed=1) as ctx:
        with caplog.at_level(logging.WARNING, logger="danlu.train"):
            assert ctx.restore()
        assert ctx.sampler is not None and (ctx.sampler.epoch, ctx.sampler.offset) == (0, 0)
    said = [r.getMessage() for r in caplog.records if "data position" in r.getMessage()]
    assert len(said) == 1 and "starts at the beginning of epoch 0" in said[0], said
