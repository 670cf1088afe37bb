"""A refused checkpoint leaves the context as it was. ``TrainContext.restore()`` set the step,
the metric history and ``extra`` (and loaded the model, the optimizer and the data position)
before the counters were checked, so a refusal left the context half restored; and a part
state refused after the metric records were resent kept a later valid restore from resending
them. Everything the context reads of a checkpoint is now checked before anything is
assigned; a ``data_state["sampler"]`` that is no dict (a bare TypeError, or a list of pairs
taken as a position), a ``metrics_pending`` that is no list of requests (handed to the
reporter unchecked), a metric history or ``extra`` of the wrong type, and a sampler state
without its epoch (a bare KeyError) are refused as damaged, naming the field."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from train_helpers import (
    checkpoint_two_steps,
    damaged_checkpoints,
    mse_loss,
    small_context,
    tiny_regression,
)

from danlu.train.context import TrainContext
from danlu.train.lr import LRController
from danlu.train.state import IncompatibleCheckpointError


def _write(
    directory: Path, monkeypatch: pytest.MonkeyPatch, damage: Callable[[dict[str, Any]], None]
) -> int:
    """Train two steps and checkpoint a state that ``damage`` changed; return the step."""
    with damaged_checkpoints(monkeypatch, damage):
        return checkpoint_two_steps(directory)


def _set_data(key: str, value: object) -> Callable[[dict[str, Any]], None]:
    def damage(state: dict[str, Any]) -> None:
        state["data_state"][key] = value

    return damage


def _one_step(ctx: TrainContext) -> None:
    """Move the live context away from a fresh one: a step, a record, an ``extra``."""
    for batch in ctx.batches(tiny_regression(16)):
        ctx.step(batch, mse_loss)
        break
    ctx.extra = {"note": "live"}


def _live(ctx: TrainContext) -> dict[str, Any]:
    """What a refused restore must leave as it was."""
    assert ctx.sampler is not None
    return {
        "step": ctx.step_num,
        "history": copy.deepcopy(ctx.history),
        "extra": dict(ctx.extra),
        "counters": (ctx.rollbacks, ctx.engine.step_count, ctx.precision.skipped_steps),
        "position": (ctx.sampler.epoch, ctx.sampler.offset),
        "batch": ctx.batch.state_dict(),
        "lr": ctx.lr.state_dict(),
    }


def _parameters(ctx: TrainContext) -> list[torch.Tensor]:
    return [p.detach().clone() for p in ctx.model.parameters()]


def _resends(ctx: TrainContext, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The ``pending`` of each ``ctx.reporter.resend`` call from now on."""
    calls: list[object] = []
    real = ctx.reporter.resend

    def resend(pending: object, step: int | None = None) -> int:
        calls.append(pending)
        return real(pending, step)

    monkeypatch.setattr(ctx.reporter, "resend", resend)
    return calls


# -- item: a refusal leaves every live object as it was ---------------------------------------
def test_a_damaged_counter_leaves_the_context_and_the_model_as_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old restore set the step to 2, the history to the checkpoint's two records and
    ``extra`` to ``{}``, and loaded the checkpoint's parameters, before refusing the counter."""
    _write(tmp_path, monkeypatch, _set_data("rollbacks", "abc"))
    with small_context(tmp_path) as ctx:
        _one_step(ctx)
        before, parameters = _live(ctx), _parameters(ctx)
        resends = _resends(ctx, monkeypatch)
        with pytest.raises(IncompatibleCheckpointError, match="its rollbacks 'abc'"):
            ctx.restore()
        assert _live(ctx) == before
        assert before["step"] == 1 and len(before["history"]) == 1  # not the checkpoint's
        assert all(
            torch.equal(a, b) for a, b in zip(parameters, ctx.model.parameters(), strict=True)
        )
        assert resends == []


def test_a_refused_part_state_leaves_the_contexts_own_state_and_a_valid_restore_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A part state refused (the LR's without ``decay``) leaves the step, history, ``extra``,
    counters, data position, the parts and the parameters as they were, and the metric
    records unsent: the old restore had set them all, and marked the records resent, so a
    later valid restore sent none (the parts and the model: see
    ``test_restore_all_or_nothing.py``)."""
    real = LRController.state_dict

    def older(self: LRController) -> dict[str, Any]:
        state = dict(real(self))
        state.pop("decay")
        return state

    damaged, whole = tmp_path / "damaged", tmp_path / "whole"
    monkeypatch.setattr(LRController, "state_dict", older)
    checkpoint_two_steps(damaged)
    monkeypatch.setattr(LRController, "state_dict", real)
    checkpoint_two_steps(whole)
    with small_context(whole) as reader:
        valid = reader.checkpoints.load_latest()
        assert valid is not None and reader.restore()
        expected = _live(reader)
    with small_context(damaged) as ctx:  # a resume: no step taken, no record sent yet
        ctx.extra = {"note": "live"}
        before, parameters = _live(ctx), _parameters(ctx)
        resends = _resends(ctx, monkeypatch)
        with pytest.raises(IncompatibleCheckpointError, match="'lr' state"):
            ctx.restore()
        assert _live(ctx) == before
        assert all(
            torch.equal(a, b) for a, b in zip(parameters, ctx.model.parameters(), strict=True)
        )
        assert resends == []
        # a later restore of a valid checkpoint still does all of it
        monkeypatch.setattr(ctx.checkpoints, "load_latest", lambda: valid)
        assert ctx.restore()
        assert _live(ctx) == expected and expected["step"] > 0 and expected["extra"] == {}
        assert len(resends) == 1  # the checkpoint's unshipped records: sent now


def test_after_a_refused_counter_a_valid_restore_still_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    damaged, whole = tmp_path / "damaged", tmp_path / "whole"
    _write(damaged, monkeypatch, _set_data("engine_steps", 2.5))
    checkpoint_two_steps(whole)
    with small_context(whole) as reader:
        valid = reader.checkpoints.load_latest()
        expected = _parameters(reader) if reader.restore() else []
    with small_context(damaged) as ctx:
        _one_step(ctx)
        with pytest.raises(IncompatibleCheckpointError, match=r"its engine_steps 2\.5"):
            ctx.restore()
        monkeypatch.setattr(ctx.checkpoints, "load_latest", lambda: valid)
        assert ctx.restore()
        assert ctx.step_num == ctx.engine.step_count > 1 and ctx.extra == {}
        assert all(torch.equal(a, b) for a, b in zip(expected, ctx.model.parameters(), strict=True))


# -- item: fields refused as damaged by name --------------------------------------------------
@pytest.mark.parametrize("value", [3, 2.5, "abc", [["epoch", 0], ["offset", 4]]], ids=repr)
def test_a_sampler_state_that_is_no_dict_is_refused_as_damaged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: object
) -> None:
    """``dict(3)`` was a bare TypeError, ``dict("abc")`` a bare ValueError, and a list of pairs
    was taken as the position."""
    step = _write(tmp_path, monkeypatch, _set_data("sampler", value))
    with small_context(tmp_path) as ctx:
        parameters = _parameters(ctx)
        with pytest.raises(IncompatibleCheckpointError) as caught:
            ctx.restore()
        assert all(
            torch.equal(a, b) for a, b in zip(parameters, ctx.model.parameters(), strict=True)
        )
        assert ctx.sampler is not None and (ctx.sampler.epoch, ctx.sampler.offset) == (0, 0)
    message = str(caught.value)
    assert f"cannot resume from the checkpoint of step {step} in {tmp_path}" in message
    assert f"its data_state's 'sampler' state {value!r} is not a dict" in message
    assert "(the checkpoint is damaged)" in message and "resume=False" in message


def test_a_sampler_state_without_its_epoch_is_refused_as_damaged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``state["epoch"]`` raised a bare KeyError out of ``ctx.restore()``, after the model,
    the step and the counters were loaded."""

    def damage(state: dict[str, Any]) -> None:
        del state["data_state"]["sampler"]["epoch"]

    _write(tmp_path, monkeypatch, damage)
    with small_context(tmp_path) as ctx:
        parameters = _parameters(ctx)
        with pytest.raises(IncompatibleCheckpointError, match="the sampler state has no epoch"):
            ctx.restore()
        assert ctx.step_num == 0
        assert all(
            torch.equal(a, b) for a, b in zip(parameters, ctx.model.parameters(), strict=True)
        )


@pytest.mark.parametrize("value", ["abc", 3, {"key": "k", "lines": []}, [1, 2]], ids=repr)
def test_metrics_pending_that_is_no_list_of_requests_is_refused_as_damaged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: object
) -> None:
    """It went to ``MetricsReporter.resend`` unchecked (a string or a number was a request
    left out with a WARNING, a dict one request)."""
    _write(tmp_path, monkeypatch, _set_data("metrics_pending", value))
    with small_context(tmp_path) as ctx:
        resends = _resends(ctx, monkeypatch)
        with pytest.raises(IncompatibleCheckpointError) as caught:
            ctx.restore()
        assert resends == [] and ctx.step_num == 0
    message = str(caught.value)
    assert f"its metrics_pending {value!r} is not a list of metric requests" in message
    assert "(the checkpoint is damaged)" in message


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("metrics_history", "abc", "its metrics_history 'abc' is not a list of records"),
        ("metrics_history", [1.5], "its metrics_history [1.5] is not a list of records"),
        ("extra", [1], "its extra [1] is not a dict"),
    ],
)
def test_a_history_or_extra_of_the_wrong_type_is_refused_as_damaged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str, value: object, said: str
) -> None:
    """``list("abc")`` became a history of three letters, ``dict([1])`` a bare TypeError."""

    def damage(state: dict[str, Any]) -> None:
        state[key] = value

    _write(tmp_path, monkeypatch, damage)
    with small_context(tmp_path) as ctx, pytest.raises(IncompatibleCheckpointError) as caught:
        ctx.restore()
    assert said in str(caught.value) and "damaged" in str(caught.value)


def test_a_checkpoint_of_none_parts_and_pending_still_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a run without the parts writes (None), and no unshipped records: resumed."""

    def damage(state: dict[str, Any]) -> None:
        state["data_state"].update(anomaly=None, goodput=None, gns=None, metrics_pending=None)
        state["extra"] = None

    step = _write(tmp_path, monkeypatch, damage)
    with small_context(tmp_path) as ctx:
        resends = _resends(ctx, monkeypatch)
        assert ctx.restore()
        assert ctx.step_num == step and ctx.extra == {} and resends == [None]
