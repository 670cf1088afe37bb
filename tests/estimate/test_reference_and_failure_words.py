"""``danlu estimate`` as a user first runs it: a model reference written as a file's name
(``mymodels.py:make``) started a trace worker whose import failed with "No module named
'mymodels.py'; 'mymodels' is not a package"; a forward failing on the generated batch was
said with torch's message and the last lines of a traceback inside torch, the user's line
cut off above them; and ``--json`` echoed ``--precision`` and ``--optimizer`` as spelled
(``"16"``, ``"BF16"``, ``"Adagrad"``) where it names the GPU as the table does."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

import danlu.estimate.memory as memory
from danlu.cli.main import app
from danlu.core.errors import SpecError
from danlu.estimate.memory import StepTrace, TraceRequest, tracer

MODELS = "walk_models"
MODELS_TEXT = textwrap.dedent(
    """
    import torch
    from torch import nn


    def wrong_width():
        def make_batch(b):
            return torch.randn(b, 16)

        def loss_fn(model, batch):
            return model(batch).mean()

        return nn.Linear(32, 4), make_batch, loss_fn
    """
)
LOSS_LINE = MODELS_TEXT.splitlines().index("        return model(batch).mean()") + 1
"""The line of ``MODELS_TEXT`` where ``loss_fn`` calls the model."""


@pytest.fixture
def models_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder holding ``walk_models.py`` and a package ``walk_pkg`` with a submodule
    ``py``, the current directory while the test runs (the modules forgotten after)."""
    (tmp_path / f"{MODELS}.py").write_text(MODELS_TEXT)
    (tmp_path / "walk_pkg").mkdir()
    (tmp_path / "walk_pkg" / "__init__.py").write_text("")
    (tmp_path / "walk_pkg" / "py.py").write_text("def make():\n    return None\n")
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    for name in (MODELS, "walk_pkg", "walk_pkg.py"):
        sys.modules.pop(name, None)
    while str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))


def test_a_file_name_as_the_module_is_refused_before_a_worker_starts(
    models_dir: Path, started_workers: list[subprocess.Popen[str]]
) -> None:
    res = CliRunner().invoke(app, ["estimate", f"{MODELS}.py:wrong_width", "-b", "4"])
    assert res.exit_code == 2, res.output
    assert f"MODEL_REF: cannot import '{MODELS}.py': give a module path" in res.output
    assert f"e.g. {MODELS}:factory" in res.output
    assert started_workers == []


def test_a_package_whose_submodule_is_named_py_is_no_file_name(models_dir: Path) -> None:
    tracer.validate(TraceRequest("walk_pkg.py:make", (1,)))  # no error
    with pytest.raises(SpecError, match="give a module path"):
        tracer.validate(TraceRequest(f"{MODELS}.py:make", (1,)))


def test_a_forward_failing_on_the_batch_names_the_line_of_the_users_code(
    models_dir: Path,
) -> None:
    from danlu.estimate.memory import trace_worker, user_program

    with pytest.raises(RuntimeError) as info:
        req = TraceRequest(f"{MODELS}:wrong_width", (2,), sys_path=(str(models_dir),))
        trace_worker.run(req, _Sink())
    words = user_program.failure_words(info.value)
    assert words.startswith("RuntimeError: ")
    assert words.endswith(f"(at {models_dir / (MODELS + '.py')}, line {LOSS_LINE}, in loss_fn)")


class _Sink:
    """A text stream that keeps nothing (the worker's progress lines)."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


def _trace(b: int) -> StepTrace:
    events = [(1, 4096 * b), (2, 1024), (2, -1024), (1, -4096 * b)]
    return StepTrace(
        batch_size=b,
        events=events,
        marks={"measure_start": 0, "measure_end": len(events)},
        peak_logical_bytes=4096 * b + 1024,
        step_start_bytes=0,
        breakdown={},
    )


@pytest.mark.parametrize(
    ("precision", "optimizer", "named"),
    [("BF16", "Adagrad", ("bf16", "adagrad")), ("16", "SGD-Momentum", ("fp16", "sgd-momentum"))],
)
def test_the_json_names_the_precision_and_optimizer_as_traced(
    monkeypatch: pytest.MonkeyPatch, precision: str, optimizer: str, named: tuple[str, str]
) -> None:
    asked: list[TraceRequest] = []

    def canned(req: TraceRequest, *args: object, **kwargs: object) -> list[StepTrace]:
        asked.append(req)
        return [_trace(b) for b in req.batch_sizes]

    monkeypatch.setattr(memory, "trace", canned)
    flags = ["--precision", precision, "--optimizer", optimizer]
    res = CliRunner().invoke(app, ["estimate", "walk_models:any", "-b", "2", *flags, "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert (out["precision"], out["optimizer"]) == named
    assert asked[0].precision == named[0]
