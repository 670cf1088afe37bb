"""A buffer whose size is set by the CPU threads a kernel runs on, not by b alone.

Traced with ``--target cpu``, batch normalisation's CPU kernels keep per-thread buffers
(measured on a 2-thread machine for 64 channels in fp32: the forward 512 bytes at b = 2,
where it runs on one thread, 1024 from b = 3 on; the backward ``max(1024, 256 * b)``). The
fit from 2,4,8 refused every untraced b saying "e.g. a b x b matrix", which sent the user
looking for a matrix the model does not have. The refusal is right (fitted through the
flat part, the backward's line has too small a slope: the peak at b = 64 came out low),
so it stays; it now says what the allocation looks like and that larger batch sizes fit.
"""

from __future__ import annotations

import pytest

from danlu.estimate.memory.fit import EnvelopeFit, ExtrapolationError
from danlu.estimate.memory.gpus import get_gpu
from danlu.estimate.memory.predict import FittedMemoryModel, MemoryEstimate

CHANNELS = 64
THREADS = 2


def _batch_norm_step(b: int) -> list[int]:
    """Live bytes over a step of Linear + BatchNorm1d(64) traced with ``--target cpu`` on a
    2-thread machine: 60 KiB of parameters and optimizer state, 392 bytes of activations a
    sample, and the two kernels' buffers as the CPU probe measured them."""
    per_thread = 2 * CHANNELS * 4  # a mean and a variance a channel, fp32
    forward_buffer = per_thread * min(b - 1, THREADS)
    backward_buffer = max(THREADS * per_thread, CHANNELS * 4 * b)
    grad_input = CHANNELS * 4 * b
    events = [
        60 << 10,
        392 * b,  # activations
        forward_buffer,
        -forward_buffer,
        grad_input,
        backward_buffer,
        -backward_buffer,
        -grad_input,
        -392 * b,
    ]
    lives, live = [], 0
    for delta in events:
        live += delta
        lives.append(live)
    return lives


def test_the_traced_sizes_are_those_measured() -> None:
    """The curve holds the buffers the CPU probe measured (the refusal's figures)."""
    sizes = {b: _batch_norm_step(b)[2] - _batch_norm_step(b)[1] for b in (2, 3, 4, 8)}
    assert sizes == {2: 512, 3: 1024, 4: 1024, 8: 1024}
    backward = {b: _batch_norm_step(b)[5] - _batch_norm_step(b)[4] for b in (2, 4, 5, 8)}
    assert backward == {2: 1024, 4: 1024, 5: 1280, 8: 2048}


def test_a_flat_allocation_is_refused_naming_larger_batch_sizes() -> None:
    fit = EnvelopeFit({b: _batch_norm_step(b) for b in (2, 4, 8)})
    assert "not linear in b" in fit.nonlinear
    assert "512, 1024 and 1024 bytes at b = 2, 4 and 8" in fit.nonlinear
    assert "flat over part of the range" in fit.nonlinear
    assert "--target cpu" in fit.nonlinear
    assert "trace larger batch sizes (e.g. 16, 32 and 64)" in fit.nonlinear
    assert "b x b" not in fit.nonlinear  # there is no such matrix
    with pytest.raises(ExtrapolationError, match="trace larger batch sizes"):
        fit(32)
    # larger than every traced batch, not only the three that show it
    four = EnvelopeFit({b: _batch_norm_step(b) for b in (2, 4, 8, 16)}).nonlinear
    assert "trace larger batch sizes (e.g. 32, 64 and 128)" in four
    ests = []
    for b in (2, 4, 8):
        lives = _batch_norm_step(b)
        peak = max(lives)
        ests.append(
            MemoryEstimate(b, "h100", peak, peak, peak, 100, peak + 100, 10**12, True, {}, 0)
        )
        ests[-1].window_live = lives
    model = FittedMemoryModel(ests, get_gpu("h100"))
    with pytest.raises(ExtrapolationError, match=r"trace larger batch sizes \(e.g. 16, 32"):
        model.max_batch(10**12)


def test_the_refusal_is_kept_because_the_lines_would_under_predict() -> None:
    """Through the backward buffer's flat part the line's slope is too small: answered
    anyway, the peak at b = 64 is under the step's."""
    fit = EnvelopeFit({b: _batch_norm_step(b) for b in (2, 4, 8)})
    fit.nonlinear = ""
    assert fit(64) < max(_batch_norm_step(64))


def test_larger_batch_sizes_fit_it_exactly() -> None:
    """Past the thread count the buffers are linear in b (constant, or the input's size)."""
    fit = EnvelopeFit({b: _batch_norm_step(b) for b in (16, 32, 64)})
    assert fit.nonlinear == "" and fit.refusal() == ""
    for b in (24, 100, 1024):
        assert fit(b) == max(_batch_norm_step(b))


def test_a_growing_allocation_still_names_a_b_x_b_matrix() -> None:
    """A size that grows faster than b at every traced b keeps the matrix hint."""
    lives = {b: [1 << 20, (1 << 20) + 4 * b * b] for b in (2, 4, 8)}
    problem = EnvelopeFit(lives).nonlinear
    assert "b x b" in problem and "flat" not in problem
