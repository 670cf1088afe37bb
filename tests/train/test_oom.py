"""OOM recovery: an injected OOM at micro-batch 64 continues at 32 with accumulation 2."""

from __future__ import annotations

import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.train.batch import BatchController


def _run(
    micro: int, injector: dt.oom.OOMInjector | None, steps: int = 12
) -> tuple[list[float], dt.TrainContext]:
    data = tiny_regression(n=64 * steps)
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    ctx = dt.init(
        model,
        opt,
        global_batch_size=64,
        micro_batch_size=micro,
        dataset_size=len(data),
        shuffle=False,
        metrics_file=False,
        oom_injector=injector,
        environ={},
    )
    losses = []
    with ctx:
        for _ in ctx.epochs(1):
            for batch in ctx.batches(data):
                losses.append(ctx.step(batch, mse_loss).loss)
    return losses, ctx


def test_injected_oom_halves_micro_batch_and_matches_accumulation_2() -> None:
    recovered, ctx = _run(64, dt.inject_oom_at(64))
    assert ctx.batch.micro == 32
    assert ctx.batch.accumulation == 2
    assert ctx.batch.global_batch == 64
    assert ctx.batch.oom_count == 1
    assert ctx.history[0]["micro_batch"] == 32
    reference, ref_ctx = _run(32, None)
    assert ref_ctx.batch.accumulation == 2
    assert len(recovered) == len(reference) == 12
    torch.testing.assert_close(
        torch.tensor(recovered), torch.tensor(reference), rtol=1e-6, atol=1e-7
    )
    # and the run at 64 without an OOM is the same trajectory within fp tolerance
    plain, _ = _run(64, None)
    torch.testing.assert_close(torch.tensor(plain), torch.tensor(reference), rtol=1e-5, atol=1e-6)


def test_oom_at_smallest_micro_batch_is_a_clear_error() -> None:
    import pytest

    from danlu.core.errors import ConfigError

    bc = BatchController(4, micro=1)
    with pytest.raises(ConfigError, match="out of memory even at micro-batch 1"):
        bc.on_oom()


def test_real_torch_oom_error_is_recognised() -> None:
    from danlu.train.oom import is_oom

    assert is_oom(torch.OutOfMemoryError("CUDA out of memory"))
    assert is_oom(RuntimeError("CUDA out of memory. Tried to allocate"))
    assert not is_oom(RuntimeError("shape mismatch"))


def test_oom_recovery_stops_at_two_samples_for_batch_normalisation() -> None:
    """Halving down to one sample made batch normalisation raise "Expected more than 1 value
    per channel" (a crash in place of the out-of-memory error); a model with it stops at 2."""
    import pytest

    from danlu.core.errors import ConfigError

    torch.manual_seed(0)
    x, y = torch.randn(64, 4), torch.randn(64, 1)

    def with_batch_norm(ooms: int) -> dt.TrainContext:
        """A model with batch normalisation whose first ``ooms`` steps at 2+ samples OOM."""
        model = torch.nn.Sequential(
            torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 1)
        )
        return dt.init(
            model,
            torch.optim.SGD(model.parameters(), lr=0.01),
            global_batch_size=8,
            metrics_file=False,
            oom_injector=dt.inject_oom_at(2, times=ooms),
            environ={},
        )

    with with_batch_norm(2) as ctx:  # 8 -> 4 -> 2 fits after two OOMs
        ctx.step((x[:8], y[:8]), mse_loss)
        assert (ctx.batch.micro, ctx.batch.accumulation) == (2, 4)
    again = with_batch_norm(10)  # nothing fits
    with again, pytest.raises(ConfigError, match="out of memory even at micro-batch 2"):
        again.step((x[:8], y[:8]), mse_loss)
    assert dt.oom.smallest_micro_batch(tiny_model()) == 1


def test_an_oom_retry_counts_no_sample_twice_in_batch_norm_statistics() -> None:
    """An OOM on the second micro-batch: the retry ran the first one's forward again, so
    its samples moved the running statistics twice (and ``num_batches_tracked`` counted one
    batch more). The statistics are put back before the retry: the run ends with those of
    a run at the smaller micro-batch from the start."""
    data = tiny_regression(n=12)

    def run(micro: int, injector: dt.oom.OOMInjector | None) -> dict[str, torch.Tensor]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 1)
        )
        with dt.init(
            model,
            torch.optim.SGD(model.parameters(), lr=0.0),  # only the statistics move
            global_batch_size=12,
            micro_batch_size=micro,
            dataset_size=len(data),
            shuffle=False,
            anomaly=None,
            oom_injector=injector,
            metrics_file=False,
            progress=False,
            environ={},
        ) as ctx:
            for batch in ctx.batches(data):
                ctx.step(batch, mse_loss)
            assert ctx.batch.micro == 3
        return {
            k: v.clone() for k, v in model[1].state_dict().items() if "running" in k or "num" in k
        }

    calls = [0]

    def second_micro_batch_fails(step: int, micro: int) -> bool:
        calls[0] += 1
        return calls[0] == 2

    expected = run(3, None)
    got = run(6, second_micro_batch_fails)
    assert int(got["num_batches_tracked"]) == int(expected["num_batches_tracked"]) == 4
    for key, value in expected.items():
        assert torch.allclose(got[key], value, atol=1e-7), key
