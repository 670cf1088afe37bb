"""A model that cannot train on a batch of one sample is a typed condition,
:class:`LoneSampleError` (a :class:`SpecError` on ``--batch-size``), from the worker's
raise through its JSON reply to :func:`trace`'s caller: ``danlu estimate`` recognised it by
comparing the message with a constant, so rewording the message would have turned its
fallback to ``--fit-points 2,4,8`` into an error."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import danlu
from danlu.core.errors import SpecError
from danlu.estimate.memory import LoneSampleError, TraceRequest, trace
from danlu.estimate.memory.trace_result import spec_error_from_reply, spec_error_reply

MODULE = "lone_sample_condition_models"


def test_reply_round_trip_keeps_the_type() -> None:
    exc = LoneSampleError("any wording at all")
    back = spec_error_from_reply(spec_error_reply(exc))
    assert isinstance(back, LoneSampleError)
    assert (back.field, back.message) == ("--batch-size", "any wording at all")


def test_a_plain_spec_error_stays_plain_whatever_it_says() -> None:
    exc = SpecError("--batch-size", "x cannot train on a batch of 1 sample")
    reply = spec_error_reply(exc)
    assert "condition" not in reply
    back = spec_error_from_reply(reply)
    assert type(back) is SpecError
    assert (back.field, back.message) == (exc.field, exc.message)


def test_the_tracer_subprocess_raises_the_typed_condition(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    (tmp_path / f"{MODULE}.py").write_text(
        textwrap.dedent(
            """
            import torch
            from torch import nn


            def batch_norm():
                def make_batch(b):
                    return torch.randn(b, 8), torch.randint(0, 3, (b,))

                def loss_fn(model, batch):
                    return nn.functional.cross_entropy(model(batch[0]), batch[1])

                net = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Linear(16, 3))
                return net, make_batch, loss_fn
            """
        )
    )
    monkeypatch.chdir(tmp_path)  # where the tracer imports the model from
    # the tracer subprocess imports the danlu this test imports
    monkeypatch.setenv("PYTHONPATH", str(Path(danlu.__file__).resolve().parents[1]))
    with pytest.raises(LoneSampleError) as caught:
        trace(TraceRequest(f"{MODULE}:batch_norm", (1,), target="cpu"))
    assert caught.value.field == "--batch-size"
    assert f"{MODULE}:batch_norm" in caught.value.message
