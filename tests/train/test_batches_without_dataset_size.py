"""``ctx.batches(dataset)`` without ``init(dataset_size=...)``: the sampler is built from
``len(dataset)`` at the first call, and a resumed run goes on from the checkpoint's data
position (before, ``ctx.epochs``/``ctx.batches`` were a ConfigError asking for
``dataset_size``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from train_helpers import mse_loss, run_worker_ranks, tiny_model, tiny_regression

import danlu.train as dt
from danlu.core.errors import ConfigError


def _train(
    directory: Path, dataset: Any, *, stop_at: int | None = None, **kwargs: Any
) -> dt.TrainContext:
    """Two epochs of 8-sample steps over ``dataset``, preempted after step ``stop_at``."""
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ctx = dt.init(
        model,
        opt,
        global_batch_size=8,
        checkpoint_dir=str(directory),
        metrics_file=False,
        anomaly=None,
        environ={},
        **kwargs,
    )
    with ctx:
        for _ in ctx.epochs(2):
            for batch in ctx.batches(dataset):
                if ctx.step_num == stop_at:
                    ctx.preemption.request()  # as SIGTERM does
                ctx.step(batch, mse_loss)
    return ctx


def _parameters(ctx: dt.TrainContext) -> list[torch.Tensor]:
    return [p.detach().clone() for p in ctx.model.parameters()]


@pytest.mark.parametrize("stop_at", [1, 4, 6])  # mid-epoch 0, at its end, mid-epoch 1
def test_a_sized_dataset_is_enough_and_resumes_exactly(tmp_path: Path, stop_at: int) -> None:
    dataset = tiny_regression(n=32)
    whole = _train(tmp_path / "whole", dataset)
    assert whole.step_num == 8 and whole.sampler is not None and whole.sampler.n == 32
    with pytest.raises(SystemExit) as stopped:
        _train(tmp_path / "cut", dataset, stop_at=stop_at)
    assert stopped.value.code == dt.PREEMPTED_EXIT_CODE
    resumed = _train(tmp_path / "cut", dataset)
    assert resumed.step_num == 8
    assert resumed.sampler is not None and resumed.sampler.epoch == 2
    for a, b in zip(_parameters(whole), _parameters(resumed), strict=True):
        torch.testing.assert_close(a, b)
    steps = [r["step"] for r in resumed.history]
    assert steps == list(range(1, 9))  # each step's record once


def test_dataset_size_still_works_and_its_checkpoint_resumes_without_it(tmp_path: Path) -> None:
    dataset = tiny_regression(n=32)
    whole = _train(tmp_path / "whole", dataset, dataset_size=32)
    with pytest.raises(SystemExit):
        _train(tmp_path / "cut", dataset, stop_at=2, dataset_size=32)
    resumed = _train(tmp_path / "cut", dataset)  # no dataset_size now: len(dataset)
    assert resumed.step_num == 8
    for a, b in zip(_parameters(whole), _parameters(resumed), strict=True):
        torch.testing.assert_close(a, b)


def test_a_checkpoint_of_another_dataset_size_is_refused_naming_both(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        _train(tmp_path, tiny_regression(n=32), stop_at=2)
    with pytest.raises(ConfigError, match=r"dataset_size=32 in the checkpoint, 40 now"):
        _train(tmp_path, tiny_regression(n=40))


def test_the_checkpoint_position_waits_for_the_sampler(tmp_path: Path) -> None:
    """A resumed run that saves before its first ``ctx.batches`` keeps the position."""
    with pytest.raises(SystemExit):
        _train(tmp_path, tiny_regression(n=32), stop_at=5)
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with dt.init(
        model,
        opt,
        global_batch_size=8,
        checkpoint_dir=str(tmp_path),
        metrics_file=False,
        environ={},
    ) as ctx:
        assert ctx.epoch == 1
        ctx.save()
        assert ctx.data_state()["sampler"]["offset"] == 16  # type: ignore[index]
    ctx = _train(tmp_path, tiny_regression(n=32))
    assert ctx.step_num == 8


def test_a_dataset_without_len_is_refused_naming_dataset_size() -> None:
    class Endless(torch.utils.data.IterableDataset[int]):
        def __iter__(self) -> Any:
            return iter(range(3))

    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with dt.init(model, opt, global_batch_size=8, metrics_file=False, environ={}) as ctx:
        with pytest.raises(ConfigError, match=r"Endless has no len\(\).*dataset_size"):
            next(iter(ctx.batches(Endless())))
        assert ctx.sampler is None


def test_epochs_without_a_dataset_count_and_are_kept(tmp_path: Path) -> None:
    """The script's own loader without ``dataset_size``: ``ctx.epochs`` counts, and a
    checkpoint keeps the count (a resume goes on from the next epoch)."""
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = tiny_regression(n=16)
    kwargs: dict[str, Any] = {"checkpoint_dir": str(tmp_path), "metrics_file": False}
    with dt.init(model, opt, global_batch_size=8, environ={}, **kwargs) as ctx:
        seen = []
        for epoch in ctx.epochs(2):
            seen.append(epoch)
            ctx.step(data.tensors, mse_loss)
            ctx.save()
        assert seen == [0, 1] and ctx.epoch == 2
    with dt.init(model, opt, global_batch_size=8, environ={}, **kwargs) as again:
        assert again.epoch == 1  # the last checkpoint: inside epoch 1's body
        assert list(again.epochs(3)) == [1, 2]


def test_ranks_with_datasets_of_different_sizes_are_refused_on_every_rank(
    tmp_path: Path,
) -> None:
    """Each rank builds its sampler from its own ``len(dataset)``: ranks given datasets of
    different sizes would share out different windows (samples skipped or repeated, a rank
    left waiting), so every rank is refused naming the sizes; one size trains."""
    out = tmp_path / "result"
    run_worker_ranks(
        Path(__file__).resolve().parent / "lazy_sampler_worker.py",
        2,
        [str(out)],
        timeout=120,
        GLOO_SOCKET_IFNAME="lo",
        CUDA_VISIBLE_DEVICES="",
    )
    for rank in range(2):
        result = json.loads(Path(f"{out}.{rank}").read_text())
        assert result["differ"] is not None and "[32, 24]" in result["differ"]
        assert result["same"] == [4, 4, 4]  # 24 samples, 8 a step over 2 ranks
