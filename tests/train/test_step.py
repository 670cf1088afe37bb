"""The training step: the gradient norm anomaly detection checks (right, NaN gradients skip
the step, spikes are caught) and the single-micro-batch fast path."""

from __future__ import annotations

import math

import pytest
import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.core.errors import DanluError
from danlu.train.step import cpu_norm, grad_norm, norm_tensor


def test_grad_norm_matches_the_definition() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 3))
    model(torch.randn(32, 64)).pow(2).mean().backward()
    params = list(model.parameters())
    ref = torch.linalg.vector_norm(torch.cat([p.grad.double().flatten() for p in params]))
    assert grad_norm(params) == pytest.approx(float(ref), rel=1e-6)
    assert float(norm_tensor([p.grad for p in params])) == pytest.approx(float(ref), rel=1e-6)
    strided = model[0].weight.grad.t().contiguous().t()  # same values, column-major
    assert not strided.is_contiguous()
    model[0].weight.grad = strided
    assert grad_norm(params) == pytest.approx(float(ref), rel=1e-6)
    for p in params:
        p.grad = None
    assert grad_norm(params) == 0.0


def test_norm_tensor_propagates_nan_and_inf_on_every_path() -> None:
    finite = torch.ones(3)
    for bad, check in ((float("nan"), math.isnan), (float("inf"), math.isinf)):
        g = torch.tensor([1.0, bad])
        assert check(float(norm_tensor([finite, g])))  # the BLAS path (dense fp32)
        assert check(float(norm_tensor([finite, g.half()])))  # the foreach path
    half = norm_tensor([torch.full((4,), 2.0, dtype=torch.float16)])
    assert float(half) == 4.0 and half.dtype == torch.float16
    assert norm_tensor([torch.full((4,), 2.0, dtype=torch.float64)]).dtype == torch.float64


def test_cpu_norm_is_a_float_for_dense_fp32_and_fp64_gradients_only() -> None:
    g32 = torch.randn(1000)
    g64 = torch.randn(7, dtype=torch.float64)
    ref = math.sqrt(float(g32.double().pow(2).sum()) + float(g64.pow(2).sum()))
    value = cpu_norm([g32, g64])
    assert isinstance(value, float) and value == pytest.approx(ref, rel=1e-6)
    assert cpu_norm([g32, g64.half()]) is None
    assert float(norm_tensor([])) == 0.0 and cpu_norm([]) == 0.0
    assert cpu_norm([torch.randn(4, 4).t()]) is None  # not contiguous
    assert math.isnan(cpu_norm([g32, torch.tensor([float("nan")])]) or 0.0)


def test_the_step_reports_the_same_norm_as_grad_norm() -> None:
    data = tiny_regression(64)
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # parameters stay put
    batch = next(iter(torch.utils.data.DataLoader(data, batch_size=16)))
    with dt.init(model, opt, global_batch_size=16, metrics_file=False, environ={}) as ctx:
        result = ctx.step(batch, mse_loss)
    mse_loss(model, batch).backward()
    assert result.grad_norm == pytest.approx(grad_norm(list(model.parameters())), rel=1e-6)


def test_nan_gradients_skip_the_step_and_spikes_are_caught() -> None:
    data = tiny_regression(512)
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    bad = {25: "nan", 30: "spike"}
    calls = [0]

    def loss_fn(m: torch.nn.Module, b: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        calls[0] += 1
        loss = mse_loss(m, b)
        if bad.get(calls[0]) == "nan":  # a finite loss with NaN gradients: sqrt'(0) * 0
            return loss + (m[0].weight * 0).abs().sqrt().sum()
        if bad.get(calls[0]) == "spike":
            return loss * 1e4
        return loss

    with dt.init(
        model, opt, global_batch_size=16, dataset_size=512, metrics_file=False, environ={}
    ) as ctx:
        results = []
        for i, b in zip(range(32), ctx.batches(data), strict=False):
            before = [p.detach().clone() for p in model.parameters()]
            results.append(ctx.step(b, loss_fn))
            after = list(model.parameters())
            unchanged = all(torch.equal(a, p) for a, p in zip(before, after, strict=True))
            assert unchanged == (i in (24, 29))  # skipped steps leave the parameters alone
    assert math.isfinite(results[24].loss) and math.isnan(results[24].grad_norm or 0.0)
    assert (results[24].anomaly, results[24].applied) == ("nonfinite_grad", False)
    assert (results[29].anomaly, results[29].applied) == ("grad_spike", False)
    assert sum(r.applied for r in results) == 30
    assert ctx.anomaly is not None
    assert ctx.anomaly.counts == {"nonfinite_grad": 1, "grad_spike": 1}


def test_single_micro_batch_fast_path_is_bit_identical_to_the_general_path() -> None:
    """One micro-batch, one process: StepEngine skips the accumulation bookkeeping. An OOM
    injector that never fires forces the general path; both must train the same bits."""
    runs = []
    for injector in (None, lambda step, micro: False):
        data = tiny_regression(256)
        model = tiny_model()
        opt = torch.optim.AdamW(model.parameters(), lr=0.01)
        with dt.init(
            model,
            opt,
            global_batch_size=32,
            dataset_size=256,
            metrics_file=False,
            oom_injector=injector,
            shuffle=False,
            environ={},
        ) as ctx:
            steps = [ctx.step(b, mse_loss) for b in ctx.batches(data)]
        params = [p.detach().clone() for p in model.parameters()]
        runs.append(([(s.loss, s.grad_norm) for s in steps], params))
    (s0, p0), (s1, p1) = runs
    assert s0 == s1 and len(s0) == 8
    assert all(torch.equal(a, b) for a, b in zip(p0, p1, strict=True))


def test_grad_norm_every_n_steps_and_the_loss_every_step() -> None:
    """``grad_norm_every=3``: the norm (metric and anomaly check) on steps 0, 3, 6, ...; the
    loss is still checked every step; clipping needs the norm every step and overrides it."""
    data = tiny_regression(512)
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    calls = [0]

    def loss_fn(m: torch.nn.Module, b: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        calls[0] += 1
        loss = mse_loss(m, b)
        return loss * float("nan") if calls[0] == 8 else loss  # step 7: off the cadence

    with dt.init(
        model,
        opt,
        global_batch_size=16,
        dataset_size=512,
        metrics_file=False,
        grad_norm_every=3,
        environ={},
    ) as ctx:
        results = [ctx.step(b, loss_fn) for _, b in zip(range(12), ctx.batches(data), strict=False)]
        history = list(ctx.history)
    has_norm = [r.grad_norm is not None for r in results]
    assert has_norm == [i % 3 == 0 for i in range(12)]
    assert [h["grad_norm"] is not None for h in history] == has_norm
    assert (results[7].anomaly, results[7].applied) == ("nonfinite_loss", False)
    assert sum(r.applied for r in results) == 11

    clipped = tiny_model()
    opt = torch.optim.SGD(clipped.parameters(), lr=0.01)
    with dt.init(
        clipped,
        opt,
        global_batch_size=16,
        dataset_size=512,
        metrics_file=False,
        grad_norm_every=3,
        clip_grad_norm=1.0,
        environ={},
    ) as ctx:
        steps = [ctx.step(b, mse_loss) for _, b in zip(range(4), ctx.batches(data), strict=False)]
    assert all(s.grad_norm is not None for s in steps)


def test_grad_norm_every_below_one_is_refused_by_name() -> None:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with pytest.raises(DanluError, match="grad_norm_every must be >= 1"):
        dt.init(model, opt, global_batch_size=16, metrics_file=False, grad_norm_every=0, environ={})
