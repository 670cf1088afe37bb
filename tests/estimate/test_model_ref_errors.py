"""A model reference as users get it wrong is an error on ``MODEL_REF`` saying what and
where, not the traced program's traceback: a module with a syntax error, one that raises
at import (both failed as "tracing ... failed" with importlib's frames), one that imports a
package that is not installed (told to move to "the directory that holds it"), and a
``make_batch`` or ``loss_fn`` that cannot be called as the step calls it (a bare TypeError
from inside the trace). An unknown ``--gpu`` names the flag and ``--gpu-table``."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from danlu.cli import estimate as estimate_cli
from danlu.core.errors import SpecError

torch = pytest.importorskip("torch")

from danlu.estimate.memory import steps  # noqa: E402 (imports torch)

MODULES = {
    "ref_err_syntax": "def make(:\n    pass\n",
    "ref_err_raises": "import os\n\n\nraise RuntimeError('no config found')\n",
    "ref_err_dependency": "import ref_err_package_not_installed\n",
    "ref_err_old_dependency": "from ref_err_shapes import name_it_lacks\n",
    "ref_err_shapes": (
        "import torch\nfrom torch import nn\n\n\n"
        "def no_batch_size():\n"
        "    return nn.Linear(8, 2), lambda: torch.randn(2, 8), lambda m, x: m(x).mean()\n\n\n"
        "def one_argument_loss():\n"
        "    return nn.Linear(8, 2), lambda b: torch.randn(b, 8), lambda x: x.mean()\n\n\n"
        "def right():\n"
        "    return nn.Linear(8, 2), lambda b, n=8: torch.randn(b, n), lambda m, x: m(x).mean()\n"
    ),
}


@pytest.fixture
def models_dir(tmp_path: Path) -> Iterator[Path]:
    """The modules above in a folder of their own (imported from it, forgotten after)."""
    for name, text in MODULES.items():
        (tmp_path / f"{name}.py").write_text(text)
    yield tmp_path
    while str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))
    for name in MODULES:
        sys.modules.pop(name, None)


def _refusal(models_dir: Path, ref: str) -> str:
    with pytest.raises(SpecError) as info:
        factory = steps.load_factory(ref, (str(models_dir),))
        steps.build(factory, ref)
    assert info.value.field == "MODEL_REF"
    return str(info.value)


def test_a_syntax_error_names_the_file_and_line(models_dir: Path) -> None:
    message = _refusal(models_dir, "ref_err_syntax:make")
    assert f"SyntaxError in {models_dir / 'ref_err_syntax.py'}, line 1" in message
    assert "fix the module" in message


def test_a_module_raising_at_import_names_the_error_and_where(models_dir: Path) -> None:
    message = _refusal(models_dir, "ref_err_raises:make")
    assert "importing 'ref_err_raises' failed: RuntimeError: no config found" in message
    assert f"{models_dir / 'ref_err_raises.py'}, line 4" in message


def test_a_missing_dependency_is_told_to_be_installed(models_dir: Path) -> None:
    message = _refusal(models_dir, "ref_err_dependency:make")
    assert "imports 'ref_err_package_not_installed', which is not installed" in message
    assert "PYTHONPATH" not in message  # moving to the module's folder would not help


def test_a_name_a_dependency_lacks_is_told_as_such(models_dir: Path) -> None:
    message = _refusal(models_dir, "ref_err_old_dependency:make")
    assert "cannot import name 'name_it_lacks' from 'ref_err_shapes'" in message
    assert f"{models_dir / 'ref_err_old_dependency.py'}, line 1" in message
    assert "install the version of 'ref_err_shapes' that the module needs" in message
    assert "PYTHONPATH" not in message


def test_a_module_not_found_is_still_told_where_to_run(models_dir: Path) -> None:
    message = _refusal(models_dir, "ref_err_nowhere:make")
    assert "cannot import 'ref_err_nowhere'" in message and "PYTHONPATH" in message


@pytest.mark.parametrize(
    ("factory", "said"),
    [
        ("no_batch_size", "calls make_batch(b), which its function refuses"),
        ("one_argument_loss", "calls loss_fn(model, batch), which its function refuses"),
    ],
)
def test_functions_the_step_cannot_call_are_refused(
    models_dir: Path, factory: str, said: str
) -> None:
    assert said in _refusal(models_dir, f"ref_err_shapes:{factory}")


def test_functions_the_step_can_call_pass(models_dir: Path) -> None:
    ref = "ref_err_shapes:right"
    model, make_batch, _ = steps.build(steps.load_factory(ref, (str(models_dir),)), ref)
    assert make_batch(3).shape == (3, 8) and isinstance(model, torch.nn.Linear)


def test_an_unknown_gpu_names_the_flag_and_the_gpu_table() -> None:
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    estimate_cli.register(app)
    app.command("noop", hidden=True)(lambda: None)
    args = ["estimate", "danlu.estimate.zoo:mlp_small", "-b", "2", "--gpu", "h300"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    line = " ".join(result.stderr.split())
    assert line.startswith("error: --gpu: unknown GPU type 'h300': use one of a10,")
    assert "--gpu-table" in line
