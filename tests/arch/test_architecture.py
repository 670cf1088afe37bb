"""The architecture of DESIGN.md, enforced: who may import whom, where the environment is
read, one exception tree, no module past the size where it must be split."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "danlu"

# package -> danlu packages it may import (besides itself). DESIGN.md, "Layers and folders".
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "estimate": {"core"},
    "sched": {"core", "estimate"},
    "sim": {"core", "estimate", "sched"},
    "train": {"core", "estimate"},
    "executors": {"core"},
    "devices": {"core"},
    "server": {"core", "estimate", "sched", "sim", "executors", "devices", "config"},
    "cli": {
        "core",
        "estimate",
        "sched",
        "sim",
        "client",
        "server",
        "executors",
        "devices",
        "config",
    },
    "client": {"core"},
    "config": {"core"},
    "__main__": {"cli"},  # ``python -m danlu``: the command line's other way in
}
# config.py for the server, train/env.py for the job; the Slurm executor's per-node task
# learns from Slurm's variables which node it runs on and hands the rest to the job; the Ray
# executor sets (and then restores) the one driver setting Ray reads from the environment
# only, its GCS reconnect timeout, around joining the cluster.
ENV_READERS = {"config.py", "train/env.py", "executors/slurm_task.py", "executors/ray_executor.py"}
MAX_LINES = 800


def _modules() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if "__pycache__" not in p.parts)


def _package(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".py") if len(rel.parts) > 1 else rel.stem


def _danlu_imports(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("danlu")]
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.level == 0
            and node.module.startswith("danlu")
        ):
            found.append((node.lineno, node.module))
    return found


def test_layers_import_only_what_design_allows() -> None:
    violations = []
    for path in _modules():
        package = _package(path)
        if package == "__init__":
            continue
        allowed = ALLOWED.get(package)
        assert allowed is not None, f"{path}: package {package!r} is not in DESIGN.md's table"
        for line, module in _danlu_imports(ast.parse(path.read_text(), str(path))):
            parts = module.split(".")
            target = parts[1] if len(parts) > 1 else "__init__"
            if target not in allowed | {package}:
                violations.append(f"{path.relative_to(SRC)}:{line} imports {module}")
    assert not violations, "imports that DESIGN.md forbids:\n" + "\n".join(violations)


def _reads_environment(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
            and node.attr in {"environ", "getenv", "environb"}
        ):
            return True
        if (
            isinstance(node, ast.ImportFrom)
            and node.module == "os"
            and {a.name for a in node.names} & {"environ", "getenv", "environb"}
        ):
            return True
    return False


def test_environment_is_read_in_one_module_per_side() -> None:
    readers = []
    for path in _modules():
        if _reads_environment(ast.parse(path.read_text())):
            rel = str(path.relative_to(SRC))
            if rel not in ENV_READERS:
                readers.append(rel)
    assert not readers, f"environment read outside {sorted(ENV_READERS)}: {readers}"


def test_every_exception_derives_from_danlu_error() -> None:
    import danlu.core.errors as errors

    builtin_bases = {"Exception", "ValueError", "KeyError", "RuntimeError", "TypeError", "OSError"}
    rogue = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = {b.id for b in node.bases if isinstance(b, ast.Name)}
                if bases and bases <= builtin_bases and node.name != "DanluError":
                    rogue.append(f"{path.relative_to(SRC)}: {node.name}({', '.join(bases)})")
    assert not rogue, "exceptions outside the DanluError tree:\n" + "\n".join(rogue)
    assert issubclass(errors.SpecError, errors.DanluError)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_modules_stay_small(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.name} has {lines} lines; split it by concern"


def test_core_sched_sim_import_without_torch_or_side_effects() -> None:
    """Importing the pure layers must not import torch, print, or touch the filesystem."""
    code = (
        "import sys, danlu.core, danlu.sched, danlu.sim.engine, danlu.sim.workload, "
        "danlu.cli.main\n"
        "assert 'torch' not in sys.modules, 'torch imported by a pure layer'\n"
        "assert 'matplotlib' not in sys.modules, 'matplotlib imported at start-up'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "", f"import printed: {done.stdout!r}"
