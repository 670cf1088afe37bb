"""A checkpoint whose controller state lacks a key this danlu reads (one written by another
version: the learning-rate controller's without ``decay``, say) is an
IncompatibleCheckpointError naming the part and the way to train from scratch, not a raw
``KeyError`` from ``ctx.restore()``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from train_helpers import checkpoint_two_steps, small_context

from danlu.train.lr import LRController
from danlu.train.state import IncompatibleCheckpointError


def _write(directory: Path) -> int:
    """Train a few steps, checkpoint, and return the step saved."""
    return checkpoint_two_steps(directory)


def test_a_part_state_without_a_key_is_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = LRController.state_dict

    def older(self: LRController) -> dict[str, Any]:
        state = dict(real(self))
        state.pop("decay")
        return state

    monkeypatch.setattr(LRController, "state_dict", older)
    _write(tmp_path)
    monkeypatch.setattr(LRController, "state_dict", real)
    with small_context(tmp_path) as ctx, pytest.raises(IncompatibleCheckpointError) as caught:
        ctx.restore()
    message = str(caught.value)
    assert "'lr' state" in message and "decay" in message
    assert "resume=False" in message


def test_a_whole_checkpoint_still_resumes(tmp_path: Path) -> None:
    saved = _write(tmp_path)
    with small_context(tmp_path) as ctx:
        assert ctx.restore()
        assert ctx.step_num == saved > 0
