"""The tracer against the real CPU allocator, and its GPU-target behaviour."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from danlu.core.errors import DataError, SpecError, UnknownNameError
from danlu.estimate.memory import (
    FittedMemoryModel,
    MemoryModel,
    TraceRequest,
    get_gpu,
    gpu_for_device,
    replay,
    trace,
)
from danlu.estimate.memory.trace_result import StepTrace

torch = pytest.importorskip("torch")
ZOO = "danlu.estimate.zoo:"


def test_import_without_torch() -> None:
    code = textwrap.dedent("""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "torch" or name.startswith("torch."):
                    raise ImportError("torch blocked")
        sys.meta_path.insert(0, Block())
        import danlu.estimate, danlu.estimate.memory, danlu.cli.estimate
        from danlu.estimate.memory import fit_piecewise_linear, transformer_memory
        print("ok", "torch" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.stdout.strip() == "ok False", out.stderr


@pytest.fixture(scope="module")
def cpu_traces() -> dict[str, list]:
    return {
        "resnet_tiny": trace(TraceRequest(ZOO + "resnet_tiny", (2, 4), target="cpu")),
        "gpt2_tiny": trace(
            TraceRequest(ZOO + "gpt2_tiny", (1, 2, 4, 32), precision="bf16", target="cpu")
        ),
    }


def test_traced_peak_matches_real_cpu_allocator(cpu_traces: dict[str, list]) -> None:
    from danlu.estimate.memory.ground_truth import cpu_peak

    for name, precision, tr in (
        ("resnet_tiny", "fp32", cpu_traces["resnet_tiny"][1]),
        ("gpt2_tiny", "bf16", cpu_traces["gpt2_tiny"][2]),
    ):
        real = cpu_peak(ZOO + name, tr.batch_size, precision=precision)
        assert abs(tr.peak_logical_bytes - real) <= 0.01 * real, (name, tr.peak_logical_bytes, real)


def test_breakdown_and_phases(cpu_traces: dict[str, list]) -> None:
    tr = cpu_traces["resnet_tiny"][0]
    assert sum(tr.breakdown.values()) == tr.peak_logical_bytes
    assert tr.breakdown["parameters"] > 0 and tr.breakdown["optimizer_state"] > 0
    m = tr.marks
    assert m["measure_start"] <= m["forward"] < m["backward"] < m["optimizer"] < m["end"]
    assert tr.timeline and max(v for _, v in tr.timeline) == tr.peak_logical_bytes


def test_fit_from_small_batches_predicts_large(cpu_traces: dict[str, list]) -> None:
    traces = {t.batch_size: t for t in cpu_traces["gpt2_tiny"]}
    gpu = get_gpu("h100")
    model = FittedMemoryModel([replay(traces[b], gpu) for b in (1, 2, 4)], gpu)
    assert isinstance(model, MemoryModel)
    assert model.predict_logical(32) == pytest.approx(traces[32].peak_logical_bytes, rel=0.01)


def test_cuda_target_adds_cublas_and_keeps_step_counters_on_host() -> None:
    (tr,) = trace(TraceRequest(ZOO + "mlp_small", (8,), optimizer="adam"))
    kinds = [k for _, k, _ in tr.sites]
    assert kinds.count("cublas") == 2
    assert len(tr.host_ids) == 8  # one step counter per parameter tensor
    est = replay(tr, get_gpu("h100"))
    assert est.peak_reserved_bytes >= est.peak_allocated_bytes >= est.peak_logical_bytes
    assert est.peak_allocated_bytes >= 2 * (32 << 20)
    assert est.peak_device_bytes == est.peak_reserved_bytes + get_gpu("h100").context_bytes


def test_bad_references_and_failing_models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SpecError, match="MODEL_REF"):
        trace(TraceRequest("no_such_module_xyz:f", (1,)))
    (tmp_path / "mymodels.py").write_text(
        textwrap.dedent("""
        import torch
        def broken():
            model = torch.nn.Linear(4, 4)
            return model, lambda b: torch.randn(b, 5), lambda m, x: m(x).sum()
        def not_a_triple():
            return 3
    """)
    )
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecError, match="make_batch"):
        trace(TraceRequest("mymodels:not_a_triple", (1,)))
    # the user's line where the forward failed, under torch's message (the traceback's last
    # lines are inside torch)
    where = r"\(at .*mymodels\.py, line 5, in <lambda>\)"
    with pytest.raises(
        DataError, match=rf"tracing mymodels:broken failed: RuntimeError: .* {where}"
    ):
        trace(TraceRequest("mymodels:broken", (1,)))
    with pytest.raises(SpecError, match="--precision"):
        trace(TraceRequest(ZOO + "mlp_small", (1,), precision="fp8"))  # type: ignore[arg-type]


def test_a_factory_that_never_returns_is_killed_at_the_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, started_workers: list[subprocess.Popen[str]]
) -> None:
    """The timeout holds while the worker prints nothing (it read the worker's output to the
    end first, so a hung factory kept its subprocess, and the caller, for good)."""
    (tmp_path / "hangs.py").write_text("import time\ndef forever():\n    time.sleep(3600)\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError, match="timed out after 2 s"):
        trace(TraceRequest("hangs:forever", (1,)), timeout_s=2.0)
    assert len(started_workers) == 1 and started_workers[0].poll() is not None


@pytest.mark.gpu
def test_reserved_prediction_on_a_real_gpu() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU available")
    from danlu.estimate.memory.ground_truth import cuda_peak

    (tr,) = trace(TraceRequest(ZOO + "gpt2_tiny", (16,)))
    gpu = gpu_for_device(
        torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0).total_memory
    )
    pred = replay(tr, gpu).peak_reserved_bytes
    real = cuda_peak(ZOO + "gpt2_tiny", 16)["reserved"]
    assert abs(pred - real) <= 0.1 * real


@pytest.mark.parametrize(
    ("device", "memory_gib", "entry"),
    [
        ("NVIDIA H200", 140, "h200"),
        ("NVIDIA H100 80GB HBM3", 80, "h100"),
        ("NVIDIA A100-SXM4-40GB", 40, "a100-40gb"),
        ("NVIDIA A100-SXM4-80GB", 80, "a100-80gb"),
        ("Tesla V100-SXM2-16GB", 16, "v100-16gb"),
        ("Tesla T4", 15, "t4"),
        ("NVIDIA GeForce RTX 4090", 24, "rtx4090"),
    ],
)
def test_gpu_for_device_reads_the_name_the_device_reports(
    device: str, memory_gib: int, entry: str
) -> None:
    assert gpu_for_device(device, memory_gib * 2**30).name == entry


def test_gpu_for_device_names_the_table_for_an_unknown_gpu() -> None:
    with pytest.raises(UnknownNameError, match="h200"):
        gpu_for_device("NVIDIA L40S", 45 * 2**30)


def test_a_cnn_estimate_on_a_gpu_warns_that_cudnn_workspaces_are_not_counted() -> None:
    """Measured on an H200 (docs/estimate-memory.md), the weight-gradient workspaces that
    cuDNN's heuristics pick are missing from CNN predictions: the estimate says so until a
    ratio is calibrated, and only for steps that have convolutions."""
    from dataclasses import replace as with_fields

    from danlu.estimate.memory.predict import CONV_WORKSPACE_WARNING

    (cnn,) = trace(TraceRequest(ZOO + "resnet_tiny", (4,)))
    (mlp,) = trace(TraceRequest(ZOO + "mlp_small", (4,)))
    h100 = get_gpu("h100")
    assert CONV_WORKSPACE_WARNING in replay(cnn, h100).warnings
    assert CONV_WORKSPACE_WARNING not in replay(mlp, h100).warnings
    calibrated = with_fields(h100, conv_workspace_ratio=1.0)
    assert CONV_WORKSPACE_WARNING not in replay(cnn, calibrated).warnings


def _workspace_trace(sites: list[tuple[int, str, int]]) -> StepTrace:
    # input (sid 1) exists; the op at event 1 outputs sid 2; both 40 MiB
    mib = 1 << 20
    events = [(1, 40 * mib), (2, 40 * mib), (2, -40 * mib), (1, -40 * mib)]
    return StepTrace(
        batch_size=1,
        events=events,
        marks={"measure_start": 0, "measure_end": len(events)},
        peak_logical_bytes=80 * mib,
        step_start_bytes=0,
        breakdown={},
        sites=sites,
        host_ids=[],
    )


def test_a_kernel_workspace_counts_towards_the_replayed_peaks() -> None:
    """An attention backward's fp32 accumulator (or a calibrated cuDNN workspace) is live
    with the op's inputs and outputs: it reached neither peak (sampled only after events,
    and freed before the outputs existed)."""
    from dataclasses import replace as with_fields

    mib = 1 << 20
    h100 = get_gpu("h100")
    plain = replay(_workspace_trace([]), h100)
    assert (plain.peak_allocated_bytes, plain.peak_reserved_bytes) == (80 * mib, 80 * mib)
    attn = replay(_workspace_trace([(2, "attn_bwd", 40 * mib)]), h100)
    assert (attn.peak_allocated_bytes, attn.peak_reserved_bytes) == (120 * mib, 120 * mib)
    conv = replay(
        _workspace_trace([(2, "conv", 40 * mib)]), with_fields(h100, conv_workspace_ratio=0.5)
    )
    assert (conv.peak_allocated_bytes, conv.peak_reserved_bytes) == (100 * mib, 100 * mib)
    uncalibrated = replay(_workspace_trace([(2, "conv", 40 * mib)]), h100)
    assert uncalibrated.peak_reserved_bytes == plain.peak_reserved_bytes  # and a warning
    before = _workspace_trace([(1, "attn_bwd", 40 * mib)])
    early = replay(with_fields(before, marks={"measure_start": 2, "measure_end": 4}), h100)
    assert early.peak_allocated_bytes == 80 * mib  # before the measured window: not counted


def test_a_gpu_workspace_site_follows_the_outputs_of_its_op() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    from danlu.estimate.memory.trace_worker import StorageTracker

    with FakeTensorMode():
        tracker = StorageTracker("cuda", 0)
        with tracker:
            x = torch.empty(2, 3, 8, 8)
            w = torch.empty(4, 3, 3, 3)
            y = torch.nn.functional.conv2d(x, w)
            nbytes = y.untyped_storage().nbytes()
    assert tracker.events[-1][1] == nbytes  # the convolution's output, the last event
    assert tracker.sites == [(len(tracker.events), "conv", nbytes)]  # after it, not before
