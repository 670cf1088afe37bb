"""Fitted M(b) = max(C_step, C0 + a*b) and its refusals."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from danlu.core.errors import DataError
from danlu.estimate.memory.fit import (
    EnvelopeFit,
    ExtrapolationError,
    fit_piecewise_linear,
    fit_two_phase,
)
from danlu.estimate.memory.gpus import get_gpu
from danlu.estimate.memory.predict import FittedMemoryModel, MemoryEstimate, replay
from danlu.estimate.memory.trace_result import StepTrace, window_live


def test_linear_points_extrapolate_exactly() -> None:
    fit = fit_piecewise_linear({1: 1100, 2: 1200, 4: 1400})
    assert fit.slope == pytest.approx(100)
    assert fit(32) == 4200
    assert fit(4) == 1400


def test_flat_prefix_then_linear() -> None:
    fit = fit_piecewise_linear({1: 5000, 2: 5000, 8: 6000, 16: 8000})
    assert fit.c_step == 5000
    assert fit(32) == 12000
    assert fit(3) == 5000


def test_refuses_when_slope_unknown() -> None:
    fit = fit_piecewise_linear({1: 5000, 2: 5000, 4: 5200})
    with pytest.raises(ExtrapolationError, match="growth with b is unknown"):
        fit(32)


def test_refuses_far_extrapolation_and_bad_fits() -> None:
    fit = fit_piecewise_linear({1: 1100, 2: 1200, 4: 1400})
    with pytest.raises(ExtrapolationError, match="more than 32x"):
        fit(129)
    bent = fit_piecewise_linear({1: 1000, 2: 2000, 4: 2100, 8: 9000})
    assert bent.residual > 0.01
    with pytest.raises(ExtrapolationError, match="not piecewise linear"):
        bent(16)


def _est(b: int, logical: int, reserved: int) -> MemoryEstimate:
    return MemoryEstimate(
        b, "h100", logical, logical, reserved, 100, reserved + 100, 10**12, True, {}, 0
    )


def test_fitted_model_protocol_and_max_batch() -> None:
    gpu = get_gpu("h100")
    fixed = gpu.cublas_workspace_bytes * gpu.cublas_handles
    gib = 1 << 30
    ests = [_est(b, gib + b * gib // 8, fixed + gib + b * gib // 8) for b in (1, 2, 4)]
    model = FittedMemoryModel(ests, gpu)
    assert model.predict(16) == fixed + gib + 2 * gib + gpu.context_bytes
    limit = model.predict(40)
    assert model.max_batch(limit) == 40
    assert model.max_batch(limit, margin_bytes=gib // 8) == 39
    assert model.max_batch(100) is None


def test_two_phase_fit_sees_the_slope_under_a_flat_looking_peak() -> None:
    from danlu.estimate.memory.fit import fit_two_phase

    # forward/backward peak 100 + 10*b, optimizer-step peak 200 + 1*b: the overall peak looks
    # flat at b = 1, 2, 4 (201, 202, 204) but the passes' slope is known
    bs = (1, 2, 4)
    fit = fit_two_phase({b: 100 + 10 * b for b in bs}, {b: 200 + b for b in bs})
    assert fit.slope_known and fit.residual < 1e-12
    assert fit(4) == 204
    assert fit(32) == 420
    assert fit(64) == 740


def _step(b: int) -> StepTrace:
    # params 3 MiB, activations 2 MiB*b kept to the end of the pass, a temporary of 1 MiB*b
    mib = 1 << 20
    ev = [
        (1, 3 * mib),
        (2, 2 * mib * b),
        (3, mib * b),
        (3, -mib * b),
        (4, 5000),
        (2, -2 * mib * b),
        (4, -5000),
    ]
    marks = {"measure_start": 1, "measure_end": len(ev), "optimizer": 5}
    live, lives = 3 * mib, [3 * mib]
    for _, d in ev[1:]:
        live += d
        lives.append(live)
    return StepTrace(b, ev, marks, max(lives), 3 * mib, {}, window_live=lives)


def test_envelope_fit_and_synthesised_replay_match_a_direct_trace() -> None:
    from danlu.estimate.memory.fit import EnvelopeFit
    from danlu.estimate.memory.predict import replay, synthesize

    fit = EnvelopeFit({b: _step(b).window_live for b in (1, 2, 4)})
    assert fit.residual < 1e-12
    assert fit(64) == _step(64).peak_logical_bytes
    gpu = get_gpu("t4")
    syn = synthesize(_step(2), _step(4), 64)
    assert syn is not None
    assert replay(syn, gpu).peak_reserved_bytes == replay(_step(64), gpu).peak_reserved_bytes
    ests = [replay(_step(b), gpu) for b in (1, 2, 4)]
    model = FittedMemoryModel(ests, gpu, traces=[_step(b) for b in (1, 2, 4)])
    assert model.predict_reserved(64) == replay(_step(64), gpu).peak_reserved_bytes


def _casts_freed(b: int, order: tuple[int, ...]) -> StepTrace:
    """A bf16 step: 3 MiB of parameters, activations (sid 2) of 64 KiB a sample, the autocast
    cache's casts of a weight (sid 3, 1.5 MiB) and a bias (sid 4, 2 KiB), a temporary of 20
    bytes a sample (sid 5) and an output of 32 KiB a sample (sid 6); then sids 2-5 are freed
    one after another in ``order`` (their weakref finalizers run in an order that differs
    from run to run) before the backward's 16 KiB a sample (sid 7) and 8 MiB of gradients
    (sid 8), the step's peak."""
    kib = 1 << 10
    sizes = {2: 64 * kib * b, 3: 1536 * kib, 4: 2 * kib, 5: 20 * b, 6: 32 * kib * b}
    ev = [(1, 3072 * kib), *sizes.items()]
    ev += [(sid, -sizes[sid]) for sid in order]
    ev += [(7, 16 * kib * b), (8, 8192 * kib), (6, -sizes[6]), (7, -16 * kib * b)]
    lives = window_live(ev, 1, len(ev))
    marks = {"measure_start": 1, "measure_end": len(ev), "optimizer": len(ev) - 1}
    return StepTrace(b, ev, marks, max(lives), lives[0], {}, window_live=lives)


def test_frees_in_another_order_do_not_move_the_envelope() -> None:
    """``danlu estimate --sweep`` printed a different logical M(64) from run to run (58.5,
    59.7, 80.9 MB; true 58.5 MB): the frees of the autocast cache's casts came in another
    order at b = 1, 2, 4, so one event's line joined different frees and rose with b."""
    from danlu.estimate.memory.fit import EnvelopeFit

    orders = {1: (3, 4, 5, 2), 2: (4, 3, 5, 2), 4: (4, 5, 3, 2)}
    traces = [_casts_freed(b, orders[b]) for b in (1, 2, 4)]
    true = _casts_freed(64, orders[1]).peak_logical_bytes
    fit = EnvelopeFit({t.batch_size: t.window_live for t in traces})
    assert fit(64) == true
    assert fit.event_misfit < 1e-12  # every event's line goes through its traced points
    gpu = get_gpu("h100")
    model = FittedMemoryModel([replay(t, gpu) for t in traces], gpu, traces=traces)
    assert model.predict_logical(64) == true
    # the measured step's curve does not depend on the order of a run of frees
    assert len({tuple(_casts_freed(4, o).window_live) for o in orders.values()}) == 1


def _contrastive(b: int, square: bool = True, swap_frees: bool = False) -> list[int]:
    """Live bytes over a step whose loss holds a ``b x b`` matrix (4 bytes a cell; ``square``
    False: ``b x 64``) next to 1 MiB of parameters and 1 KiB of activations a sample;
    ``swap_frees``: two frees of the step come in the other order (as the autocast cache's
    may)."""
    kib = 1 << 10
    matrix = 4 * b * (b if square else 64)
    events = [
        1 << 20,  # parameters (the live bytes the measured step starts with)
        kib * b,  # activations
        512,  # a cast weight
        256,  # another
        matrix,  # the similarity matrix
        -matrix,
        *((-256, -512) if swap_frees else (-512, -256)),
        -kib * b,
    ]
    lives, live = [], 0
    for delta in events:
        live += delta
        lives.append(live)
    return lives


def test_an_allocation_quadratic_in_b_is_refused_not_extrapolated() -> None:
    """max_batch returned a batch that did not fit: the b x b matrix is 4 KiB at b=32 next
    to 1 MiB and the envelope fitted the traced peaks within its tolerance, then
    under-predicted 16 % at b=1024."""
    from danlu.estimate.memory.fit import EnvelopeFit

    fit = EnvelopeFit({b: _contrastive(b) for b in (8, 16, 32)})
    assert fit.residual < fit.tolerance  # the traced peaks alone do not show it
    assert "not linear in b" in fit.nonlinear and "b x b" in fit.nonlinear
    for b in (8, 16, 32):
        assert fit(b) == max(_contrastive(b))  # traced: exact
    for b in (4, 24, 1024):
        with pytest.raises(ExtrapolationError, match="not linear in b"):
            fit(b)
    gpu = get_gpu("h100")
    ests = []
    for b in (8, 16, 32):
        peak = max(_contrastive(b))
        ests.append(_est(b, peak, peak + (64 << 20)))
        ests[-1].window_live = _contrastive(b)
    model = FittedMemoryModel(ests, gpu)
    with pytest.raises(ExtrapolationError, match="not linear in b"):
        model.max_batch(10**12)
    # two traced sizes cannot tell; frees in another order are no growth
    assert EnvelopeFit({b: _contrastive(b) for b in (8, 16)}).nonlinear == ""
    shuffled = {b: _contrastive(b, False, swap_frees=b == 16) for b in (8, 16, 32)}
    linear = EnvelopeFit(shuffled)
    assert linear.nonlinear == ""
    assert linear(1024) == max(_contrastive(1024, False))


def test_max_batch_at_the_cap_is_known_as_a_lower_bound() -> None:
    gpu = get_gpu("h100")
    ests = [_est(b, (1 << 30) + (b << 20), (1 << 30) + (b << 20)) for b in (1, 2, 4)]
    model = FittedMemoryModel(ests, gpu)
    assert model.max_batch_cap == 4 * 32
    assert model.max_batch(10**13) == model.max_batch_cap  # everything fits: the search's end
    assert model.max_batch(model.predict(100)) == 100


@pytest.mark.parametrize(
    "fit",
    [
        lambda: fit_piecewise_linear({1: 0, 2: 0}),
        lambda: fit_piecewise_linear({1: 0, 2: 100, 4: 200}),
        lambda: fit_two_phase({1: 0, 2: 0}, {1: 0, 2: 0}),
        lambda: fit_two_phase({1: 100, 2: 200}, {1: 0, 2: 50}),
        lambda: EnvelopeFit({1: [0, 0], 2: [0, 0]}),
    ],
)
def test_a_zero_byte_trace_is_refused(fit: Callable[[], object]) -> None:
    # the relative misfit divided by the traced bytes: ZeroDivisionError, and in the
    # envelope a NaN misfit that passed the tolerance check and answered every batch
    with pytest.raises(DataError, match="b=1 peaks at 0 bytes"):
        fit()


@pytest.mark.parametrize(
    "fit",
    [
        lambda: fit_piecewise_linear({0: 100, 2: 200}),
        lambda: fit_two_phase({0: 100, 2: 200}, {0: 100, 2: 110}),
        lambda: EnvelopeFit({0: [50, 100], 2: [50, 200]}),
    ],
)
def test_a_batch_size_below_one_is_refused(fit: Callable[[], object]) -> None:
    with pytest.raises(DataError, match="batch size 0"):
        fit()
