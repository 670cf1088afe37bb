"""``danlu estimate``: a factory that moves or casts its model (``.to("cpu")``,
``.float()``, ``.half()``, ``.to(torch.bfloat16)``) could not be traced: under
``FakeTensorMode`` ``Module._apply`` swaps each fake parameter with ``swap_tensors``, which
refuses a tensor the fake mode's memo holds a weakref to ("_apply(): Couldn't swap
Linear.weight"), so a job with ``gpu_memory: auto`` fell back to a whole GPU."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app
from danlu.core.errors import SpecError
from danlu.estimate.memory import StepTrace, TraceRequest, get_gpu, replay

torch = pytest.importorskip("torch")

MODULE = "review68_castmodels"
CAST_MODELS = '''"""A model moved or cast by its factory (written by the review-68 tests)."""
import torch
import torch.nn.functional as F
from torch import nn


def _loss(model, batch):
    x, y = batch
    return F.cross_entropy(model(x).float(), y)


def _batches(dtype):
    return lambda b: (torch.randn(b, 256, dtype=dtype), torch.randint(0, 10, (b,)))


def _net(dtype=None):
    return nn.Sequential(
        nn.Linear(256, 256, dtype=dtype), nn.ReLU(), nn.Linear(256, 10, dtype=dtype)
    )


def plain():
    return _net(), _batches(torch.float32), _loss


def to_cpu():
    return _net().to("cpu"), _batches(torch.float32), _loss


def float_():
    return _net().float(), _batches(torch.float32), _loss


def half():
    return _net().half(), _batches(torch.float16), _loss


def half_built():
    return _net(torch.float16), _batches(torch.float16), _loss


def bf16():
    return _net().to(torch.bfloat16), _batches(torch.bfloat16), _loss


def bf16_built():
    return _net(torch.bfloat16), _batches(torch.bfloat16), _loss


def held_elsewhere():
    import weakref

    net = _net()
    net.observers = [weakref.ref(p) for p in net.parameters()]  # e.g. an EMA helper
    return net.half(), _batches(torch.float16), _loss
'''

BATCH = 4


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The factories' module, in a folder of its own (removed from ``sys.path`` after)."""
    import sys

    folder = tmp_path_factory.mktemp("review68_cast")
    (folder / f"{MODULE}.py").write_text(CAST_MODELS)
    yield folder
    while str(folder) in sys.path:
        sys.path.remove(str(folder))
    sys.modules.pop(MODULE, None)


def _trace(models_dir: Path, factory: str) -> StepTrace:
    """One step of ``factory`` traced in this process, as the tracer subprocess traces it."""
    from danlu.estimate.memory import trace_worker

    req = TraceRequest(f"{MODULE}:{factory}", (BATCH,), sys_path=(str(models_dir),))
    out = io.StringIO()
    trace_worker.run(req, out)
    last = json.loads(out.getvalue().splitlines()[-1])
    assert "result" in last, last
    return StepTrace.from_json(last["result"][0])


@pytest.mark.parametrize(
    ("factory", "reference"),
    [
        ("to_cpu", "plain"),
        ("float_", "plain"),
        ("half", "half_built"),
        ("bf16", "bf16_built"),
    ],
    ids=["to-cpu", "float", "half", "to-bfloat16"],
)
def test_a_moved_or_cast_model_is_traced_like_one_built_so(
    models_dir: Path, factory: str, reference: str
) -> None:
    """The factory's ``.to()``/``.float()``/``.half()`` raised "Couldn't swap Linear.weight";
    now its step is the same as that of the model built on that device and in that dtype:
    the same live bytes, breakdown and (replayed for an H100) allocator peaks."""
    got, want = _trace(models_dir, factory), _trace(models_dir, reference)
    assert got.peak_logical_bytes == want.peak_logical_bytes
    assert got.breakdown == want.breakdown
    assert got.step_start_bytes == want.step_start_bytes
    gpu = get_gpu("h100")
    mine, theirs = replay(got, gpu), replay(want, gpu)
    assert mine.peak_allocated_bytes == theirs.peak_allocated_bytes
    assert mine.peak_reserved_bytes == theirs.peak_reserved_bytes


@pytest.mark.parametrize("factory", ["half", "bf16"], ids=["half", "to-bfloat16"])
def test_a_cast_to_16_bits_halves_the_parameter_state(models_dir: Path, factory: str) -> None:
    """Estimated with the cast dtype's sizes: parameters and AdamW's state take half the
    bytes of the fp32 model's."""
    cast, fp32 = _trace(models_dir, factory), _trace(models_dir, "plain")
    for key in ("parameters", "optimizer_state"):
        assert cast.breakdown[key] * 2 == fp32.breakdown[key], key
    assert cast.peak_logical_bytes < fp32.peak_logical_bytes


def test_a_parameter_held_by_another_weakref_is_a_clear_model_ref_error(
    models_dir: Path,
) -> None:
    """A parameter that something else holds a weakref to still cannot be swapped: the
    error names MODEL_REF and what to change, not torch's internals."""
    from danlu.estimate.memory import trace_worker

    req = TraceRequest(f"{MODULE}:held_elsewhere", (BATCH,), sys_path=(str(models_dir),))
    with pytest.raises(SpecError) as caught:
        trace_worker.run(req, io.StringIO())
    assert caught.value.field == "MODEL_REF"
    message = caught.value.message
    assert f"{MODULE}:held_elsewhere" in message and "weakref" in message
    assert "build" in message  # what to change: build it in that dtype/device, or cast later


def test_danlu_estimate_traces_a_factory_that_moves_its_model(
    models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reviewer's command: ``danlu estimate castmodels:to_cpu -b 4`` exited 2 with
    "tracing ... failed: RuntimeError: _apply(): Couldn't swap Linear.weight"."""
    monkeypatch.chdir(models_dir)
    res = CliRunner().invoke(app, ["estimate", f"{MODULE}:to_cpu", "-b", str(BATCH), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["batch_size"] == BATCH and out["peak_logical_bytes"] > 0
