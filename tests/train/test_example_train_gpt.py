"""``examples/train_gpt.py``, the loop of a script's own on ``danlu.train.init``: it prints the
LR each step trained with, reports its progress towards ``--steps`` (1 on the last step),
trains no step past ``--steps`` when resumed at that bound, and builds its model without a
torch warning."""

from __future__ import annotations

import importlib.util
import re
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import danlu.train as dt
from danlu.train.context import TrainContext

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_gpt.py"


@pytest.fixture(scope="module")
def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("train_gpt_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(
    example: ModuleType, monkeypatch: pytest.MonkeyPatch, *args: str, **init_extra: Any
) -> TrainContext:
    """Run the example's ``main`` with ``args`` (``init`` given ``init_extra`` and an empty
    environment too); returns the context it opened."""
    opened: list[TrainContext] = []
    original = dt.init

    def init(*a: Any, **k: Any) -> TrainContext:
        opened.append(original(*a, **{**k, **init_extra, "environ": {}}))
        return opened[-1]

    monkeypatch.setattr(dt, "init", init)
    monkeypatch.setattr(sys, "argv", ["train_gpt.py", "--precision", "fp32", *args])
    example.main()
    (ctx,) = opened
    return ctx


def test_it_prints_the_lr_each_step_used_and_reports_its_progress(
    example: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ctx = _run(example, monkeypatch, "--steps", "5")
    printed = re.search(r"step 5: .* lr (\S+) ", capsys.readouterr().out)
    assert printed is not None
    last = ctx.history[-1]
    assert last["step"] == 5
    # the LR step 5 trained with (its cosine's last value before 0), not the next step's 0
    assert float(printed.group(1)) == pytest.approx(last["lr"], rel=0.01)
    assert float(printed.group(1)) > 0
    assert last["progress"] == 1.0  # the loop's bound is --steps, not its 100 epochs


def test_a_run_resumed_at_its_step_bound_trains_no_more(
    example: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    first = _run(
        example, monkeypatch, "--steps", "2", "--checkpoint-dir", str(tmp_path),
        checkpoint_every_steps=1,
    )  # fmt: skip
    assert first.step_num == 2
    again = _run(example, monkeypatch, "--steps", "2", "--checkpoint-dir", str(tmp_path))
    assert again.step_num == 2


def test_its_model_builds_without_a_warning(example: ModuleType) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        example.TinyGPT()
