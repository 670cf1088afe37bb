"""``danlu estimate``: the fitted M(b) was not monotone in the batch size (the
allocator replay of gpt2_tiny gave reserved peaks of 100, 98, 100, 98 MiB at b = 8..11), so
``--max-batch`` (a bisection that assumed M non-decreasing) printed a "largest safe batch"
of 12 above batches the same ``--sweep`` marked OOM (7, 8, 10); the server takes that answer
as a job's ``micro_batch_limit``."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app
from danlu.estimate.memory import (
    FittedMemoryModel,
    StepTrace,
    TraceRequest,
    get_gpu,
    replay,
    trace,
)
from danlu.estimate.memory.predict import next_replay_point
from danlu.estimate.optimize import largest_batch

pytest.importorskip("torch")

MODEL = "danlu.estimate.zoo:gpt2_tiny"
LIMIT = 649_000_000 + 242_024_448
"""The reviewer's --gpu-memory (649,000,000 bytes, between the non-monotone reserved peaks,
when the H100's context was 520 MiB) plus the 230.8125 MiB by which the measured context is
larger: the same reserved peaks still fit under it."""
SWEEP = range(1, 129)
"""Every batch the fit answers from b = 1, 2, 4 (32x the largest)."""


@pytest.fixture(scope="module")
def traces() -> list[StepTrace]:
    """gpt2_tiny traced at b = 1, 2, 4."""
    return trace(TraceRequest(MODEL, (1, 2, 4)))


@pytest.fixture(scope="module")
def fitted(traces: list[StepTrace]) -> FittedMemoryModel:
    """M(b) of gpt2_tiny from b = 1, 2, 4, replayed for an H100 share of ``LIMIT`` bytes."""
    gpu = replace(get_gpu("h100"), capacity_bytes=LIMIT)
    return FittedMemoryModel([replay(t, gpu) for t in traces], gpu, traces=traces)


@pytest.mark.parametrize(
    "what",
    ["predict_logical", "predict_reserved", "predict"],
    ids=["logical", "reserved", "device"],
)
def test_a_bigger_batch_never_predicts_less_memory(fitted: FittedMemoryModel, what: str) -> None:
    values = [getattr(fitted, what)(b) for b in SWEEP]
    drops = [
        (b, values[i - 1], values[i])
        for i, b in enumerate(SWEEP)
        if i and values[i] < values[i - 1]
    ]
    assert drops == []


def test_the_largest_safe_batch_is_one_below_the_first_that_does_not_fit(
    fitted: FittedMemoryModel,
) -> None:
    """Every batch up to the answer fits, and the next one does not."""
    answer = fitted.max_batch(LIMIT)
    assert answer is not None and answer < fitted.max_batch_cap
    assert all(fitted.predict(b) <= LIMIT for b in range(1, answer + 1))
    assert fitted.predict(answer + 1) > LIMIT
    assert largest_batch(fitted, LIMIT) == answer


def test_the_traced_batches_stay_exact_where_monotone(fitted: FittedMemoryModel) -> None:
    """The running maximum never lowers a prediction, and at the traced batches (which rise
    with b here) it is the replayed trace itself."""
    for b, estimate in fitted.estimates.items():
        assert fitted.predict_reserved(b) == estimate.peak_reserved_bytes
        assert fitted.predict_logical(b) == estimate.peak_logical_bytes


def test_above_128_the_answer_is_a_replay_point_below_which_everything_fits(
    traces: list[StepTrace],
) -> None:
    """Past b=128 the reserved peak is replayed 1/64 apart (a walk over every b up to 32x the
    largest traced one cost 30 s for ``-b 1000 --max-batch``): the prediction is still
    non-decreasing, constant between two points, and the answer is a point with every batch
    up to it fitting and the next one not."""
    gpu = get_gpu("h100")
    model = FittedMemoryModel(
        [replay(t, gpu) for t in traces], gpu, max_extrapolation=64.0, traces=traces
    )
    assert model.max_batch_cap == 256
    values = [model.predict(b) for b in range(1, 257)]
    assert values == sorted(values)
    points = [1]
    while points[-1] < 256:
        points.append(next_replay_point(points[-1], frozenset([1, 2, 4, 256])))
    assert points[:128] == list(range(1, 129)) and points[128:131] == [130, 132, 134]
    assert model.predict(129) == model.predict(130)  # 129 is no point: 130's value
    limit = (model.predict(200) + model.predict(220)) // 2
    answer = model.max_batch(limit)
    assert answer is not None and answer in points and 128 < answer < 220
    assert all(model.predict(b) <= limit for b in range(1, answer + 1))
    assert model.predict(answer + 1) > limit
    assert largest_batch(model, limit) == answer


def test_sweep_verdicts_and_max_batch_agree() -> None:
    """The reviewer's command: the sweep's verdicts and ``--max-batch`` must tell one story:
    every batch up to the answer fits, the one after it does not."""
    sweep = ",".join(str(b) for b in range(1, 17))
    res = CliRunner().invoke(
        app,
        [
            "estimate",
            MODEL,
            "--gpu-memory",
            str(LIMIT),
            "--margin",
            "0B",
            "--max-batch",
            "--sweep",
            sweep,
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    verdicts = {row["batch_size"]: row["fits"] for row in out["sweep"]}
    answer = out["max_batch"]
    assert answer is not None and answer < 16
    assert [b for b, fits in verdicts.items() if fits] == list(range(1, answer + 1))
    devices = [row["peak_device_bytes"] for row in out["sweep"]]
    assert devices == sorted(devices)
