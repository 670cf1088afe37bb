"""``danlu estimate``'s answers below the traced batches, and ``--gpu-memory`` in decimal
gigabytes.

* A model that cannot train on one sample (batch normalisation) is fitted from 2,4,8; where
  the limit left room for the fit's batch-1 figure only, ``--max-batch`` answered 1, a
  batch the step fails at. An answer below every traced batch is now checked: known (the
  default points fell back to 2,4,8) or traced, a batch of one sample the model cannot train
  on answers "none", naming the smallest traced batch and what it needs.
* ``--gpu-memory 80G`` is 80e9 bytes (74.5 GiB), where an 80 GiB GPU was surely meant: a
  note says so (not an error: the size is what was written).
"""

from __future__ import annotations

import json
import textwrap

import pytest
from tests.estimate.trace_fakes import canned_traces
from typer.testing import CliRunner

import danlu.estimate.memory as memory
from danlu.cli.main import app
from danlu.estimate.memory import StepTrace, TraceRequest
from danlu.estimate.report import decimal_gpu_size_note

pytest.importorskip("torch")

MODEL = "small_answer_models:wide"
WIDE = textwrap.dedent(
    """
    import torch
    from torch import nn


    def wide():
        # 4 MiB of activations a sample: batch 1 and batch 2 differ by whole 2 MiB segments
        model = nn.Sequential(nn.Linear(16, 1 << 20), nn.ReLU(), nn.Linear(1 << 20, 1))

        def make_batch(b):
            return torch.randn(b, 16), torch.randn(b, 1)

        def loss_fn(model, batch):
            return nn.functional.mse_loss(model(batch[0]), batch[1])

        return model, make_batch, loss_fn
    """
)


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> dict[int, StepTrace]:
    """The wide model traced once at every batch size the tests ask for."""
    folder = tmp_path_factory.mktemp("models")
    (folder / "small_answer_models.py").write_text(WIDE)
    req = TraceRequest(MODEL, (1, 2, 4, 8), sys_path=(str(folder),))
    return {t.batch_size: t for t in memory.trace(req)}


def _between_one_and_two(traced: dict[int, StepTrace]) -> int:
    """A limit that the fit from 2,4,8 says batch 1 fits and batch 2 does not."""
    gpu = memory.get_gpu("h100")
    fits = [traced[b] for b in (2, 4, 8)]
    model = memory.FittedMemoryModel([memory.replay(t, gpu) for t in fits], gpu, traces=fits)
    one, two = model.predict(1), model.predict(2)
    assert one < two  # the premise: a limit between them exists
    return (one + two) // 2


def _max_batch(*flags: str) -> tuple[dict[str, object], str, str]:
    res = CliRunner().invoke(app, ["estimate", MODEL, "--max-batch", "--margin", "0", *flags])
    assert res.exit_code == 0, res.output
    (line,) = [x for x in res.stdout.splitlines() if x.startswith("largest safe batch")]
    json_res = CliRunner().invoke(
        app, ["estimate", MODEL, "--max-batch", "--margin", "0", *flags, "--json"]
    )
    assert json_res.exit_code == 0, json_res.output
    return json.loads(json_res.stdout), line, res.stderr


@pytest.mark.parametrize("points", [[], ["--fit-points", "2,4,8"]], ids=["default", "given"])
def test_batch_one_of_a_model_that_cannot_train_on_it_is_no_answer(
    traced: dict[int, StepTrace], monkeypatch: pytest.MonkeyPatch, points: list[str]
) -> None:
    """The default points fall back to 2,4,8 (known); given 2,4,8, the answer 1 is traced
    and refused. Either way: none, naming batch 2 and what it needs."""
    asked: list[tuple[int, ...]] = []
    monkeypatch.setattr(memory, "trace", canned_traces(traced, lone_sample=True, asked=asked))
    limit = _between_one_and_two(traced)
    result, line, _ = _max_batch("--gpu-memory", str(limit), *points)
    assert result["max_batch"] is None, result
    assert result["max_batch_needs_batch_size"] == 2
    need = result["max_batch_needs_bytes"]
    assert isinstance(need, int) and need > limit
    assert "none: it does not fit even at batch 2 (it cannot train on a batch of 1" in line


def test_batch_one_of_a_model_that_trains_on_it_is_checked_and_answered(
    traced: dict[int, StepTrace], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fitted from 2,4,8, the answer 1 is traced to check: it runs, so it stands."""
    asked: list[tuple[int, ...]] = []
    monkeypatch.setattr(memory, "trace", canned_traces(traced, lone_sample=False, asked=asked))
    limit = _between_one_and_two(traced)
    result, line, _ = _max_batch("--gpu-memory", str(limit), "--fit-points", "2,4,8")
    assert result["max_batch"] == 1
    assert line.endswith(": 1")
    assert (1,) in asked  # checked by a trace


def test_an_answer_within_the_traced_batches_is_not_traced_again(
    traced: dict[int, StepTrace], monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[tuple[int, ...]] = []
    monkeypatch.setattr(memory, "trace", canned_traces(traced, lone_sample=True, asked=asked))
    result, _, _ = _max_batch("--fit-points", "2,4,8")
    assert isinstance(result["max_batch"], int) and result["max_batch"] > 8
    assert all(1 not in sizes for sizes in asked)


@pytest.mark.parametrize(
    ("given", "note"),
    [
        ("80G", "--gpu-memory 80G is 80e9 bytes (74.5GiB); write 80GiB for an 80 GiB GPU"),
        ("24gb", "--gpu-memory 24gb is 24e9 bytes (22.4GiB); write 24GiB for a 24 GiB GPU"),
        ("141 GB", "--gpu-memory 141 GB is 141e9 bytes (131.3GiB); write 141GiB for a 141 "),
    ],
)
def test_a_common_gpu_size_in_decimal_gigabytes_gets_a_note(given: str, note: str) -> None:
    said = decimal_gpu_size_note(given)
    assert said is not None and said.startswith(note), said


@pytest.mark.parametrize("given", ["80GiB", "80Gi", "75G", "80000M", "80.5G", "85899345920"])
def test_other_sizes_get_no_note(given: str) -> None:
    assert decimal_gpu_size_note(given) is None


def test_the_note_is_printed_and_the_size_kept(
    traced: dict[int, StepTrace], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One line on stderr; the limit is the 80e9 bytes written (not an error)."""
    asked: list[tuple[int, ...]] = []
    monkeypatch.setattr(memory, "trace", canned_traces(traced, lone_sample=False, asked=asked))
    args = ["estimate", MODEL, "-b", "2", "--gpu-memory", "80G", "--json"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["limit_bytes"] == 80 * 1000**3
    notes = [line for line in res.stderr.splitlines() if line.startswith("note:")]
    assert notes == [
        "note: --gpu-memory 80G is 80e9 bytes (74.5GiB); write 80GiB for an 80 GiB GPU"
    ], res.stderr
