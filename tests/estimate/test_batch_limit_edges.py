"""``danlu estimate --max-batch`` at the edges of its limit: a limit smaller than the model
at batch 1 says what batch 1 needs (it printed "none (b=1 does not fit)" alone, leaving the
user to guess how far off the limit was), a limit exactly at a prediction keeps that batch,
and the answer never shrinks as the limit grows, whatever unit writes it (``80G`` is
decimal, ``80GiB`` binary and above the h100's capacity, so capped there)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app
from danlu.core.units import parse_bytes
from danlu.estimate.memory import StepTrace, TraceRequest, get_gpu, load_gpu_table, trace

pytest.importorskip("torch")

MODEL = "danlu.estimate.zoo:gpt2_tiny"


@pytest.fixture(scope="module")
def traces() -> list[StepTrace]:
    """gpt2_tiny traced once at b = 1, 2, 4 (the default fit points)."""
    return trace(TraceRequest(MODEL, (1, 2, 4)))


@pytest.fixture
def estimate(
    traces: list[StepTrace], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., Any]]:
    """Runs ``danlu estimate MODEL --max-batch ARGS`` with the traces above (no new trace):
    its JSON object, or with ``text=True`` its standard output."""
    from danlu.estimate import memory

    def cached(req: TraceRequest, *args: Any, **kwargs: Any) -> list[StepTrace]:
        by_size = {t.batch_size: t for t in traces}
        assert set(req.batch_sizes) <= set(by_size), req.batch_sizes
        return [by_size[b] for b in req.batch_sizes]

    monkeypatch.setattr(memory, "trace", cached)

    def run(*args: str, text: bool = False) -> Any:
        res = CliRunner().invoke(
            app, ["estimate", MODEL, "--max-batch", *args, *([] if text else ["--json"])]
        )
        assert res.exit_code == 0, res.output
        return res.stdout if text else json.loads(res.stdout)

    yield run


def test_a_limit_below_batch_one_says_what_batch_one_needs(
    estimate: Callable[..., Any],
) -> None:
    out = estimate("--gpu-memory", "500MiB", "--margin", "0B")
    assert out["max_batch"] is None
    assert out["max_batch_needs_batch_size"] == 1
    need = out["max_batch_needs_bytes"]
    assert need > out["limit_bytes"] == parse_bytes("500MiB", "--gpu-memory")
    text = " ".join(estimate("--gpu-memory", "500MiB", "--margin", "0B", text=True).split())
    assert "does not fit even at batch 1, which needs" in text
    assert "over the 500.0MiB the limit leaves after the margin" in text


def test_the_need_is_batch_one_s_peak_on_the_gpu(estimate: Callable[..., Any]) -> None:
    fits = estimate("--gpu-memory", "60GiB", "--sweep", "1")
    need = estimate("--gpu-memory", "500MiB")["max_batch_needs_bytes"]
    assert need == fits["sweep"][0]["peak_device_bytes"]
    assert "max_batch_needs_bytes" not in fits  # an answer needs no explanation


def test_a_limit_exactly_at_a_prediction_keeps_that_batch(estimate: Callable[..., Any]) -> None:
    sizes = ",".join(map(str, range(1, 41)))
    peaks = [
        row["peak_device_bytes"]
        for row in estimate("--gpu-memory", "60GiB", "--sweep", sizes)["sweep"]
    ]
    # the last batch before the peak rises (the reserved peak grows in segments: batches
    # share a value), well above batch 1
    b = max(i + 1 for i in range(len(peaks) - 1) if peaks[i] < peaks[i + 1])
    assert b > 2, peaks
    assert estimate("--gpu-memory", str(peaks[b - 1]), "--margin", "0B")["max_batch"] == b
    below = estimate("--gpu-memory", str(peaks[b - 1] - 1), "--margin", "0B")["max_batch"]
    assert below is not None and below < b and peaks[below - 1] < peaks[b - 1]


LIMITS = [
    "800MiB",
    "850MB",
    "1073741823",
    "1GiB",
    "1073741825",
    "1G",
    "1GB",
    "2GiB",
    "2147483648",
    "80G",
    "80GB",
    "80GiB",
    "200GiB",
]
"""``--gpu-memory`` values around powers of two, in binary and decimal units, below and
above the h100's capacity (79.2GiB: ``80G`` is under it, ``80GiB`` over it)."""


@pytest.mark.parametrize("margin", ["0B", "5%"])
def test_a_larger_limit_never_gives_a_smaller_batch(
    estimate: Callable[..., Any], margin: str
) -> None:
    answers = []
    for limit in sorted(LIMITS, key=lambda v: parse_bytes(v, "--gpu-memory")):
        out = estimate("--gpu-memory", limit, "--margin", margin)
        answers.append((out["limit_bytes"], out["max_batch"] or 0, limit))
    assert [a[:2] for a in answers] == sorted(a[:2] for a in answers), answers
    assert answers[0][1] < answers[-1][1]  # the limits span answers, not one answer


def test_80g_is_decimal_and_80gib_is_capped_at_the_capacity(
    estimate: Callable[..., Any],
) -> None:
    capacity = get_gpu("h100", load_gpu_table(None)).capacity_bytes
    decimal = estimate("--gpu-memory", "80G")
    binary = estimate("--gpu-memory", "80GiB")
    assert (decimal["limit_bytes"], decimal["limit_source"]) == (80 * 10**9, "--gpu-memory")
    assert (binary["limit_bytes"], binary["limit_source"]) == (capacity, "capacity")
    assert decimal["max_batch"] <= binary["max_batch"]
