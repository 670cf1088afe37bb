"""What a trace says about the user's program beyond its figures.

* ``torch.compile``: a compiled ``loss_fn``, ``make_batch``, ``forward`` (decorated, or
  set on the instance) or submodule was traced as eager without a word (only a compiled
  model was noted); the warning now names what was compiled.
* The step's own autocast: a ``loss_fn`` (or a model) entering ``torch.autocast`` to
  another precision than the one estimated for, or turning autocast off, was traced
  without a word; a CUDA autocast does nothing on the CPU the tracer runs on, so the
  figures were fp32's for a step that computes in bf16 on the GPU.
* A program that exits (``sys.exit``, ``argparse`` without its arguments) failed with "the
  tracer exited with status 0" (or argparse's usage of ``trace_worker.py``); one that
  reads a file that is not there failed with the bare ``FileNotFoundError`` and a
  traceback. Both are now a :class:`SpecError` on ``MODEL_REF`` saying what to change.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

import danlu
from danlu.core.errors import SpecError
from danlu.estimate.memory.trace_result import StepTrace, TraceRequest

pytest.importorskip("torch")

MODULE = "user_program_notes_models"
FACTORIES = textwrap.dedent(
    """
    import argparse
    import sys

    import torch
    from torch import nn


    def _batch(b):
        return torch.randn(b, 16), torch.randint(0, 4, (b,))


    def _loss(model, batch):
        return nn.functional.cross_entropy(model(batch[0]), batch[1])


    def _mlp():
        return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


    def plain():
        return _mlp(), _batch, _loss


    def compiled_loss():
        return _mlp(), _batch, torch.compile(_loss)


    def compiled_batch():
        return _mlp(), torch.compile(_batch), _loss


    class Decorated(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = _mlp()

        @torch.compile
        def forward(self, x):
            return self.net(x)


    def compiled_forward():
        return Decorated(), _batch, _loss


    def compiled_forward_attribute():
        net = _mlp()
        net.forward = torch.compile(net.forward)
        return net, _batch, _loss


    def compiled_layer():
        net = _mlp()
        net[2] = torch.compile(net[2])
        return net, _batch, _loss


    def _autocast_loss(device, dtype=None, enabled=True):
        def loss(model, batch):
            with torch.autocast(device or batch[0].device.type, dtype=dtype, enabled=enabled):
                return _loss(model, batch)

        return loss


    def cuda_bf16():
        return _mlp(), _batch, _autocast_loss("cuda", torch.bfloat16)


    def own_bf16():
        return _mlp(), _batch, _autocast_loss(None, torch.bfloat16)


    def autocast_off():
        return _mlp(), _batch, _autocast_loss(None, enabled=False)


    class HeadInFp32(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(16, 32)
            self.head = nn.Linear(32, 4)

        def forward(self, x):
            h = self.body(x)
            with torch.autocast(x.device.type, enabled=False):
                return self.head(h.float())


    def head_in_fp32():
        return HeadInFp32(), _batch, _loss


    def exits():
        sys.exit(0)


    def reads_argv():
        parser = argparse.ArgumentParser()
        parser.add_argument("--data", required=True)
        parser.parse_args()
        return plain()


    def reads_data():
        with open("no-such-dir/train.bin", "rb") as f:
            f.read()
        return plain()


    def reads_data_in_make_batch():
        def make_batch(b):
            with open("no-such-dir/batch.bin", "rb") as f:
                f.read()
            return _batch(b)

        return _mlp(), make_batch, _loss
    """
)

Tracer = Callable[[TraceRequest], list[StepTrace]]


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The factories' module, in a folder of its own (removed from ``sys.path`` after)."""
    folder = tmp_path_factory.mktemp("user_program")
    (folder / f"{MODULE}.py").write_text(FACTORIES)
    (folder / "exits_at_import.py").write_text("import sys\nsys.exit(0)\n")
    yield folder
    while str(folder) in sys.path:
        sys.path.remove(str(folder))
    for name in (MODULE, "exits_at_import"):
        sys.modules.pop(name, None)


def _traced(tracer: Tracer, folder: Path, factory: str, precision: str = "fp32") -> StepTrace:
    req = TraceRequest(f"{MODULE}:{factory}", (4,), precision=precision, sys_path=(str(folder),))  # type: ignore[arg-type]
    return tracer(req)[0]


@pytest.mark.parametrize(
    ("factory", "part"),
    [
        ("compiled_loss", "loss_fn"),
        ("compiled_batch", "make_batch"),
        ("compiled_forward", "the model"),
        ("compiled_forward_attribute", "the model"),
        ("compiled_layer", "the model's '2'"),
    ],
)
def test_every_compiled_part_is_named_and_traced_eagerly(
    models_dir: Path, trace_in_process: Tracer, factory: str, part: str
) -> None:
    compiled = _traced(trace_in_process, models_dir, factory)
    eager = _traced(trace_in_process, models_dir, "plain")
    assert compiled.peak_logical_bytes == eager.peak_logical_bytes
    assert eager.warnings == []
    (warning,) = compiled.warnings
    assert warning.startswith(f"torch.compile'd: {part}; traced as the eager program"), warning


def test_a_cuda_autocast_of_the_step_s_own_is_said_with_its_precision(
    models_dir: Path, trace_in_process: Tracer
) -> None:
    (warning,) = _traced(trace_in_process, models_dir, "cuda_bf16").warnings
    assert "torch.autocast('cuda', dtype=torch.bfloat16)" in warning
    assert "the estimate is for precision fp32" in warning
    assert "these figures are fp32's, not the bf16 the step computes in on a GPU" in warning
    assert "--precision bf16 (a job: training.precision: bf16)" in warning
    # estimated as the GPU computes it: no mismatch
    assert _traced(trace_in_process, models_dir, "cuda_bf16", "bf16").warnings == []


def test_an_autocast_the_trace_follows_is_said_too(
    models_dir: Path, trace_in_process: Tracer
) -> None:
    (warning,) = _traced(trace_in_process, models_dir, "own_bf16", "fp16").warnings
    assert "the estimate is for precision fp16: these figures follow the step (bf16)" in warning
    assert "--precision bf16" in warning


def test_a_step_that_turns_autocast_off_is_said_the_reverse(
    models_dir: Path, trace_in_process: Tracer
) -> None:
    (warning,) = _traced(trace_in_process, models_dir, "autocast_off", "bf16").warnings
    assert "turns autocast off" in warning and "precision bf16" in warning
    assert "--precision fp32" in warning


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_step_as_estimated_or_a_layer_kept_in_fp32_gets_no_warning(
    models_dir: Path, trace_in_process: Tracer, precision: str
) -> None:
    assert _traced(trace_in_process, models_dir, "plain", precision).warnings == []
    assert _traced(trace_in_process, models_dir, "head_in_fp32", precision).warnings == []


@pytest.mark.parametrize(
    ("ref", "said"),
    [
        (f"{MODULE}:exits", "exits (SystemExit(0), at "),
        ("exits_at_import:factory", "exits (SystemExit(0), at "),
        (f"{MODULE}:reads_argv", "SystemExit(2) (an argument parser exits so on a missing"),
    ],
)
def test_a_program_that_exits_is_a_model_ref_error(
    models_dir: Path, trace_in_process: Tracer, ref: str, said: str
) -> None:
    req = TraceRequest(ref, (2,), sys_path=(str(models_dir),))
    with pytest.raises(SpecError) as caught:
        trace_in_process(req)
    assert caught.value.field == "MODEL_REF"
    assert said in caught.value.message
    assert "if __name__ == '__main__':" in caught.value.message


@pytest.mark.parametrize(
    ("factory", "path"),
    [
        ("reads_data", "no-such-dir/train.bin"),
        ("reads_data_in_make_batch", "no-such-dir/batch.bin"),
    ],
)
def test_a_file_not_there_is_a_model_ref_error_saying_where_it_was_looked_for(
    models_dir: Path,
    trace_in_process: Tracer,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    factory: str,
    path: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecError) as caught:
        _traced(trace_in_process, models_dir, factory)
    assert caught.value.field == "MODEL_REF"
    message = caught.value.message
    assert f"cannot open {path!r} (No such file or directory, at " in message
    assert f"{MODULE}.py, line " in message  # the user's line, not the tracer's
    assert repr(str(tmp_path)) in message  # where it was looked for


def test_the_command_says_it_without_a_traceback(
    models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the tracer subprocess, as ``danlu estimate`` runs it."""
    from danlu.cli.main import app

    monkeypatch.chdir(models_dir)
    monkeypatch.setenv("PYTHONPATH", str(Path(danlu.__file__).resolve().parents[1]))
    res = CliRunner().invoke(app, ["estimate", f"{MODULE}:reads_argv", "-b", "2"])
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith(f"error: MODEL_REF: {MODULE}:reads_argv exits (SystemExit(2)")
    assert "Traceback" not in res.stderr
    assert "exited with status" not in res.stderr
