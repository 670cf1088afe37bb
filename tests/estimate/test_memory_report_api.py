"""``danlu.estimate.estimate_memory``: the memory estimate as one call, the one ``danlu
estimate`` makes. It was missing (``import danlu.estimate`` gave nothing to call); the output
never said which ``gpu_memory`` to submit for the traced batch; and a breakdown at a peak
before the backward pass made the gradients said ``gradients 0B`` with nothing more, as if
they were not counted."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

import danlu.estimate.memory as memory
from danlu.cli.main import app
from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.core.errors import SpecError
from danlu.core.spec import parse_spec
from danlu.core.units import format_bytes
from danlu.estimate.memory import StepTrace, TraceRequest, get_gpu, predict, replay

torch = pytest.importorskip("torch")

MODEL = "danlu.estimate.zoo:gpt2_tiny"


@pytest.fixture(scope="module")
def traced() -> dict[int, StepTrace]:
    """gpt2_tiny traced once at batch 8, in this process as the tracer's worker traces it:
    its peak is early in the backward pass, before the gradients are made."""
    from danlu.estimate.memory import trace_worker

    out = io.StringIO()
    trace_worker.run(TraceRequest(MODEL, (8,)), out)
    reply = json.loads(out.getvalue().splitlines()[-1])
    return {t.batch_size: t for t in map(StepTrace.from_json, reply["result"])}


@pytest.fixture
def asked(traced: dict[int, StepTrace], monkeypatch: pytest.MonkeyPatch) -> list[TraceRequest]:
    """Every trace served from :func:`traced`, the command's, the call's and the control
    plane's alike (no subprocess); the requests, in order."""
    requests: list[TraceRequest] = []

    def canned(req: TraceRequest, *args: object, **kwargs: object) -> list[StepTrace]:
        requests.append(req)
        return [traced[b] for b in req.batch_sizes]

    monkeypatch.setattr(memory, "trace", canned)
    monkeypatch.setattr(predict, "trace", canned)
    return requests


def test_the_call_returns_what_the_command_prints(asked: list[TraceRequest]) -> None:
    from danlu.estimate import MemoryReport, estimate_memory

    report = estimate_memory(MODEL, 8)
    assert isinstance(report, MemoryReport)
    res = CliRunner().invoke(app, ["estimate", MODEL, "-b", "8", "--json"])
    assert res.exit_code == 0, res.output
    printed = json.loads(res.stdout)
    called = report.to_json()
    # the same object but for the seconds the two traces took
    printed.pop("trace_seconds"), called.pop("trace_seconds")
    assert printed == called
    assert report.estimate.peak_device_bytes == printed["peak_device_bytes"] > 0


def test_a_factory_is_named_for_the_tracer(asked: list[TraceRequest], tmp_path: Path) -> None:
    """A function is traced by its module and name; a module this process imported from a
    directory of its own (a notebook's ``sys.path.append``) is imported from there."""
    from danlu.estimate import estimate_memory
    from danlu.estimate.zoo import gpt2_tiny

    estimate_memory(gpt2_tiny, 8)
    assert asked[-1].model_ref == MODEL
    (tmp_path / "report_api_models.py").write_text(
        "from danlu.estimate.zoo import gpt2_tiny\n\ndef make():\n    return gpt2_tiny()\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        from report_api_models import make  # type: ignore[import-not-found]

        estimate_memory(make, 8)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("report_api_models", None)
    assert asked[-1].model_ref == "report_api_models:make"
    assert str(tmp_path.resolve()) in asked[-1].sys_path


@pytest.mark.parametrize(
    ("call", "field", "words"),
    [
        (lambda f: f("danlu.estimate.zoo:gpt2_tiny", 0), "batch_size", "1..1,073,741,824"),
        (lambda f: f(lambda: None, 2), "model", "top level"),
        (lambda f: f(object(), 2), "model", "a model object cannot be traced"),
        (lambda f: f(MODEL, 2, margin="2GiB"), "margin", "--max-batch only"),
        (lambda f: f(MODEL, 2, gpu="k80"), "gpu", "unknown GPU type 'k80'"),
        (lambda f: f(MODEL, sweep=[2, 0]), "sweep", "1..1,073,741,824"),
    ],
)
def test_bad_arguments_are_named(
    monkeypatch: pytest.MonkeyPatch,
    call: Callable[[Callable[..., object]], object],
    field: str,
    words: str,
) -> None:
    """Refused before anything is traced, naming the argument (the command names its flag)."""
    from danlu.estimate import estimate_memory

    asked: list[TraceRequest] = []
    monkeypatch.setattr(memory, "trace", lambda req, *args, **kwargs: asked.append(req))
    with pytest.raises(SpecError) as info:
        call(estimate_memory)
    assert info.value.field == field, info.value
    assert words in info.value.message
    assert asked == []


def test_the_command_still_names_its_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "trace", lambda *args, **kwargs: pytest.fail("traced"))
    res = CliRunner().invoke(app, ["estimate", MODEL, "-b", "0"])
    assert res.exit_code == 2
    assert "error: --batch-size: batch size must lie within 1..1,073,741,824" in res.stderr


def test_the_gpu_memory_to_submit_is_what_auto_charges(asked: list[TraceRequest]) -> None:
    """The same trace, resolved by the control plane for a one-GPU job of batch 8 with
    ``gpu_memory: auto`` on an H100, and estimated for batch 8 on an h100."""
    from danlu.estimate import estimate_memory
    from danlu.server.routes.estimation import resolve_gpu_memory

    spec = parse_spec(
        {
            "name": "j",
            "command": ["true"],
            "resources": {"gpus": 1, "gpu_memory": "auto"},
            "training": {"global_batch_size": 8, "model": MODEL},
        }
    )
    cluster = Cluster((Node("n0", 1, gpu_type("H100")),), name="t")
    charged = resolve_gpu_memory(spec, cluster, 60.0).gpu_memory
    report = estimate_memory(MODEL, 8, gpu="h100")
    assert charged is not None and report.submit_gpu_memory_bytes == charged
    res = CliRunner().invoke(app, ["estimate", MODEL, "-b", "8", "--json"])
    assert json.loads(res.stdout)["submit_gpu_memory_bytes"] == charged
    res = CliRunner().invoke(app, ["estimate", MODEL, "-b", "8"], env={"COLUMNS": "300"})
    (line,) = [s for s in res.stdout.splitlines() if s.startswith("gpu_memory to submit")]
    assert line.startswith(f"gpu_memory to submit for b=8 per GPU on h100: {charged} ("), line
    assert "as gpu_memory: auto charges it" in line and "--data-parallel" in line


def test_gradients_not_live_at_the_peak_are_said_with_their_size(
    traced: dict[int, StepTrace], asked: list[TraceRequest]
) -> None:
    from danlu.estimate.zoo import gpt2_tiny

    grads = sum(p.numel() * p.element_size() for p in gpt2_tiny()[0].parameters())
    est = replay(traced[8], get_gpu("h100"))
    assert est.breakdown["gradients"] == 0  # the breakdown at the peak is as it was
    assert (est.gradient_bytes, est.peak_phase) == (grads, "backward")
    note = est.breakdown_notes["gradients"]
    assert note.startswith("not live at the peak, in the backward pass before it makes them")
    assert f"their own size is {format_bytes(grads)} ({grads} bytes)" in note

    res = CliRunner().invoke(app, ["estimate", MODEL, "-b", "8", "--json"])
    out = json.loads(res.stdout)
    assert out["breakdown"]["gradients"] == 0 and out["gradient_bytes"] == grads
    assert out["breakdown_notes"] == {"gradients": note}
    assert out["peak_phase"] == "backward"
    res = CliRunner().invoke(app, ["estimate", MODEL, "-b", "8"], env={"COLUMNS": "300"})
    assert "gradients (not live at the peak)" in res.stdout
    assert f"gradients: {note}" in res.stdout.splitlines()


def test_gradients_part_live_or_whole_are_said_so() -> None:
    from danlu.estimate.memory.predict import gradients_note

    assert gradients_note(4 << 20, 4 << 20, "optimizer") is None  # all live: nothing to say
    assert gradients_note(0, 0, "forward") is None  # nothing trainable... nothing to say
    part = gradients_note(1 << 20, 4 << 20, "backward")
    assert part == (
        f"1.0MiB of their 4.0MiB ({4 << 20} bytes) live at the peak, in the backward pass "
        "that makes them"
    )
    forward = gradients_note(0, 4 << 20, "forward")
    assert forward is not None and forward.startswith("not live at the peak, in the forward")


def test_the_package_says_what_it_exports() -> None:
    import danlu.estimate as estimate

    for name in estimate.__all__:
        assert getattr(estimate, name) is not None
    with pytest.raises(AttributeError):
        estimate.no_such_name  # noqa: B018
