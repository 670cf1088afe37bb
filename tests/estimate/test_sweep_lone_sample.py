"""``danlu estimate --sweep`` rows below every traced batch, for a model that cannot train
on one sample (batch normalisation in training): given ``--fit-points 2,4,8``, the row of
batch 1 said "fits" (the fit's figure), where the step fails with torch's "Expected more
than 1 value per channel". Batch 1 is traced once to check, as ``--max-batch`` checks an
answer below the traced batches: the row then says why it is refused."""

from __future__ import annotations

import json
import textwrap

import pytest
from tests.estimate.trace_fakes import canned_traces
from typer.testing import CliRunner

import danlu.estimate.memory as memory
from danlu.cli.estimate import LONE_SAMPLE_ROW
from danlu.cli.main import app
from danlu.estimate.memory import StepTrace, TraceRequest

pytest.importorskip("torch")

MODEL = "sweep_lone_sample_models:net"
MODELS = textwrap.dedent(
    """
    import torch
    from torch import nn


    def net():
        def make_batch(b):
            return torch.randn(b, 8), torch.randint(0, 3, (b,))

        def loss_fn(model, batch):
            return nn.functional.cross_entropy(model(batch[0]), batch[1])

        return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)), make_batch, loss_fn
    """
)


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> dict[int, StepTrace]:
    """The model traced once at every batch size the tests ask for."""
    folder = tmp_path_factory.mktemp("models")
    (folder / "sweep_lone_sample_models.py").write_text(MODELS)
    req = TraceRequest(MODEL, (1, 2, 4, 8), sys_path=(str(folder),))
    return {t.batch_size: t for t in memory.trace(req)}


def _estimate(*flags: str) -> tuple[dict[str, object], str]:
    """The command's JSON object and its table's text, for the same flags."""
    args = ["estimate", MODEL, "--fit-points", "2,4,8", *flags]
    res = CliRunner().invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    text = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert text.exit_code == 0, text.output
    return json.loads(res.stdout), text.stdout


def test_a_sweep_row_of_one_sample_the_model_cannot_train_on_is_refused(
    traced: dict[int, StepTrace], monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[tuple[int, ...]] = []
    monkeypatch.setattr(memory, "trace", canned_traces(traced, lone_sample=True, asked=asked))
    result, text = _estimate("--sweep", "1,2,16")
    rows = {r["batch_size"]: r for r in result["sweep"]}  # type: ignore[attr-defined]
    assert rows[1] == {"batch_size": 1, "error": LONE_SAMPLE_ROW}
    assert rows[2]["fits"] is True and rows[16]["fits"] is True
    (row,) = [line for line in text.splitlines() if line.strip("│ ").startswith("1 ")]
    assert "refused: the model cannot train on a batch of 1 sample" in row
    assert "fits" not in row


def test_a_sweep_row_of_one_sample_that_trains_is_answered_by_the_fit(
    traced: dict[int, StepTrace], monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[tuple[int, ...]] = []
    monkeypatch.setattr(memory, "trace", canned_traces(traced, lone_sample=False, asked=asked))
    result, _ = _estimate("--sweep", "1,2")
    rows = {r["batch_size"]: r for r in result["sweep"]}  # type: ignore[attr-defined]
    assert rows[1]["fits"] is True
    assert (1,) in asked  # checked by a trace


def test_sweep_and_max_batch_trace_batch_one_once(
    traced: dict[int, StepTrace], monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[tuple[int, ...]] = []
    monkeypatch.setattr(memory, "trace", canned_traces(traced, lone_sample=True, asked=asked))
    res = CliRunner().invoke(
        app,
        ["estimate", MODEL, "--fit-points", "2,4,8", "--sweep", "1,4", "--max-batch", "--json"],
    )
    assert res.exit_code == 0, res.output
    assert [sizes for sizes in asked if 1 in sizes] == [(1,)]
    result = json.loads(res.stdout)
    assert result["sweep"][0] == {"batch_size": 1, "error": LONE_SAMPLE_ROW}


def test_no_row_below_the_traced_batches_no_extra_trace(
    traced: dict[int, StepTrace], monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[tuple[int, ...]] = []
    monkeypatch.setattr(memory, "trace", canned_traces(traced, lone_sample=True, asked=asked))
    result, _ = _estimate("--sweep", "2,4,16")
    assert all("error" not in r for r in result["sweep"])  # type: ignore[attr-defined]
    assert all(1 not in sizes for sizes in asked)
