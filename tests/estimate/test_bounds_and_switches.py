"""Huge caps and counts, switches that must be bools, GPU memory that must be a size, and
precision names spelled as ``danlu.train`` spells them."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import torch

from danlu.core.errors import DataError, SpecError, UnknownNameError
from danlu.estimate.goodput import GoodputModel, GradientStats, optimize_goodput
from danlu.estimate.memory import steps
from danlu.estimate.memory.analytic import (
    TransformerConfig,
    activation_bytes_per_layer,
    transformer_memory,
)
from danlu.estimate.memory.gpus import GPUS, gpu_for_device, gpu_for_memory
from danlu.estimate.memory.trace_result import TraceRequest
from danlu.estimate.memory.tracer import validate
from danlu.estimate.optimize import fastest_batch, plan_accumulation
from danlu.estimate.throughput import (
    StepMeasurement,
    ThroughputModel,
    ThroughputParams,
    load_placements,
    load_scalability,
)

MODEL = ThroughputModel(ThroughputParams(0.01, 0.001, 0.05, 0.001, 0.02, 0.0005, 2.0))
GPT2 = TransformerConfig(layers=12, hidden=768, heads=12, seq=1024, vocab=50257)
MLP = "danlu.estimate.zoo:mlp_small"


def field_of(call: Callable[[], Any]) -> str:
    """The field of the SpecError that ``call`` raises."""
    with pytest.raises(SpecError) as info:
        call()
    return info.value.field


# --- fastest_batch under a huge cap -----------------------------------------------------


@pytest.fixture
def few_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail once fastest_batch has evaluated more than 64 chunks of 2**16 batches: a cap of
    2**62 walked 2**46 of them (effectively forever)."""
    real = ThroughputModel.step_times
    calls = [0]

    def step_times(self: ThroughputModel, *args: Any, **kwargs: Any) -> npt.NDArray[np.float64]:
        calls[0] += 1
        assert calls[0] <= 64, "fastest_batch walks on through batches that cannot be faster"
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ThroughputModel, "step_times", step_times)


@pytest.mark.parametrize("cap", [2**45, 2**55, 2**62])
@pytest.mark.parametrize(("nodes", "replicas"), [(1, 1), (2, 8)])
def test_fastest_batch_returns_under_a_huge_cap(
    few_chunks: None, cap: int, nodes: int, replicas: int
) -> None:
    best = fastest_batch(MODEL, nodes, replicas, cap)
    assert best is not None and cap - 2**20 <= best <= cap
    rate = MODEL.throughput(best, nodes, replicas)
    # as fast as any batch (the throughput never falls as the batch grows)
    for other in (cap, cap - 1, cap // 2, 2**30, 64, 1):
        assert rate >= MODEL.throughput(other, nodes, replicas)


def test_fastest_batch_keeps_its_answers_for_ordinary_caps(few_chunks: None) -> None:
    # the answers of the walk to the last tie (2**36 took 44 s there)
    assert fastest_batch(MODEL, 2, 8, 70_000) == 70_000
    assert fastest_batch(MODEL, 2, 8, 2**30) == 2**30 - 2
    assert fastest_batch(MODEL, 2, 8, 2**36) == 2**36 - 30886


def test_fastest_batch_without_a_fixed_compute_time_returns(few_chunks: None) -> None:
    # alpha_c = 0 on one replica: every batch equally fast, up to rounding
    flat = ThroughputModel(ThroughputParams(0.0, 0.001, 0.05, 0.001, 0.02, 0.0005, 2.0))
    best = fastest_batch(flat, 1, 1, 2**40)
    assert best is not None
    assert flat.throughput(best, 1, 1) == pytest.approx(1000.0, rel=1e-12)


# --- switches ---------------------------------------------------------------------------


@pytest.mark.parametrize("switch", ["no", "false", 0, 1, None])
def test_optimize_goodput_accumulation_must_be_a_bool(switch: Any) -> None:
    model = GoodputModel(MODEL, GradientStats(0.01, 1000.0), init_batch_size=32)

    def run(accumulation: Any) -> Any:
        return optimize_goodput(
            model, 1, 2, max_batch_size=1024, max_local_bsz=8, accumulation=accumulation
        )

    assert field_of(lambda: run(switch)) == "accumulation"
    assert run(np.bool_(False)) == run(False)
    assert run(False) != run(True)  # the switch still matters


def test_plan_accumulation_exact_must_be_a_bool() -> None:
    exact: Any = "no"
    assert field_of(lambda: plan_accumulation(1000, 4, 64, exact=exact)) == "exact"
    assert plan_accumulation(1000, 4, 64, exact=False).global_batch == 1008


@pytest.mark.parametrize("name", ["master_weights", "sequence_parallel", "flash_attention"])
def test_transformer_memory_switches_must_be_bools(name: str) -> None:
    kw: dict[str, Any] = {name: "no"}
    assert field_of(lambda: transformer_memory(GPT2, **kw)) == name
    if name != "master_weights":
        assert field_of(lambda: activation_bytes_per_layer(GPT2, 1, **kw)) == name


@pytest.mark.parametrize(
    ("change", "flag"),
    [
        ({"checkpointing": "no"}, "--checkpointing"),
        ({"data_parallel": "no"}, "--data-parallel"),
        ({"accumulation": 1.5}, "--accumulation"),
        ({"batch_sizes": (2.5,)}, "--batch-size"),
    ],
)
def test_trace_request_fields_of_the_wrong_kind_are_refused(
    change: dict[str, Any], flag: str
) -> None:
    fields: dict[str, Any] = {"model_ref": MLP, "batch_sizes": (1,), **change}
    assert field_of(lambda: validate(TraceRequest(**fields))) == flag


# --- measurement loaders ----------------------------------------------------------------

PLACEMENTS = "placement,local_bsz,step_time,sync_time\n"
SCALABILITY = "num_nodes,num_replicas,local_bsz,step_time,sync_time\n"


@pytest.mark.parametrize(
    ("name", "body", "column"),
    [
        ("placements.csv", PLACEMENTS + "1,1e300,0.5,0.1\n", "local_bsz"),
        ("placements.csv", PLACEMENTS + "1,2147483648,0.5,0.1\n", "local_bsz"),
        ("placements.csv", PLACEMENTS + "9" * 120_000 + ",4,0.5,0.1\n", "placement"),
        ("scalability.csv", SCALABILITY + "1e300,1e300,8,0.5,0.1\n", "num_replicas"),
        ("scalability.csv", SCALABILITY + "1,2000000,8,0.5,0.1\n", "num_replicas"),
        ("scalability.csv", SCALABILITY + "1,1,1e300,0.5,0\n", "local_bsz"),
    ],
    ids=["bsz-1e300", "bsz-2**31", "1.08M-replicas", "nodes-1e300", "2M-replicas", "bsz-s"],
)
def test_loaders_refuse_absurd_counts(tmp_path: Path, name: str, body: str, column: str) -> None:
    path = tmp_path / name
    path.write_text(body)
    loader = load_placements if name == "placements.csv" else load_scalability
    with pytest.raises(DataError) as info:
        loader(path)
    message = str(info.value)
    assert f"{path}:2:" in message and repr(column) in message
    assert "must lie within 1.." in message


def test_loaders_keep_the_largest_counts_a_job_may_have(tmp_path: Path) -> None:
    path = tmp_path / "scalability.csv"
    path.write_text(SCALABILITY + "2,1048576,1073741824,0.5,0.1\n")
    (row,) = load_scalability(path)
    assert (row.num_replicas, row.local_bsz) == (2**20, 2**30)


def test_measurements_and_placements_built_in_code_are_bounded() -> None:
    assert field_of(lambda: StepMeasurement(1, 1, 2**31, 0.5, 0.0)) == "local_bsz"
    assert field_of(lambda: StepMeasurement(1, 2**21, 8, 0.5, 0.1)) == "num_replicas"
    # 10**400 replicas raised OverflowError building the float arrays
    assert field_of(lambda: MODEL.step_time(1, 1, 10**400)) == "num_replicas"


# --- GPU memory -------------------------------------------------------------------------


@pytest.mark.parametrize("memory", [math.nan, math.inf, -1, -(2**30), "8GiB", None, True])
@pytest.mark.parametrize("name", ["H100", "NVIDIA L40S"])
def test_gpu_for_memory_refuses_a_memory_that_is_no_size(name: str, memory: Any) -> None:
    # NaN made a GPU spec of NaN bytes (for a name the table lacks)
    assert field_of(lambda: gpu_for_memory(name, memory)) == "memory"


def test_gpu_for_memory_still_reads_zero_as_unknown_memory() -> None:
    assert gpu_for_memory("H100", 0) == GPUS["h100"]
    with pytest.raises(UnknownNameError):
        gpu_for_memory("NVIDIA L40S", 0)
    numpy_memory: Any = np.int64(45 << 30)  # as a cluster array holds it
    assert gpu_for_memory("NVIDIA L40S", numpy_memory).capacity_bytes == 45 << 30


def test_gpu_for_device_refuses_a_memory_that_is_no_size() -> None:
    assert field_of(lambda: gpu_for_device("NVIDIA H100", math.nan)) == "total_memory"  # type: ignore[arg-type]


# --- precision names --------------------------------------------------------------------

SPELLINGS = [
    ("BF16", "bf16"),
    (" Bf16 ", "bf16"),
    ("FP16", "fp16"),
    ("16", "fp16"),
    ("FP32", "fp32"),
    ("32", "fp32"),
]


@pytest.mark.parametrize(("spelling", "name"), SPELLINGS)
def test_the_estimator_reads_precision_names_as_danlu_train_does(spelling: str, name: str) -> None:
    assert transformer_memory(GPT2, precision=spelling) == transformer_memory(GPT2, precision=name)
    req = TraceRequest(MLP, (1,), precision=spelling)  # type: ignore[arg-type]
    assert req.precision == name
    validate(req)
    assert TraceRequest.from_json(json.loads(json.dumps(req.to_json()))) == req


@pytest.mark.parametrize("bad", ["fp8", "", "bfloat16", None, 16])
def test_unknown_precision_names_are_refused(bad: Any) -> None:
    assert field_of(lambda: transformer_memory(GPT2, precision=bad)) == "--precision"
    assert field_of(lambda: TraceRequest(MLP, (1,), precision=bad)) == "--precision"
    # autocast read every name but "fp32" and "bf16" as float16
    assert field_of(lambda: steps.autocast(bad)) == "--precision"


def test_autocast_picks_the_dtype_of_the_name_in_any_case() -> None:
    for spelling, dtype in (("BF16", torch.bfloat16), ("FP16", torch.float16)):
        context = steps.autocast(spelling)
        assert isinstance(context, torch.autocast) and context.fast_dtype == dtype
    assert not isinstance(steps.autocast("FP32"), torch.autocast)
