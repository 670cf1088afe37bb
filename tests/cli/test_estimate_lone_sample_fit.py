"""``danlu estimate --sweep``/``--max-batch`` with the default ``--fit-points`` (1,2,4) on a
model that cannot train on one sample (batch normalisation): the trace at batch 1 is refused,
so the fit is traced at 2,4,8 instead, with a note on stderr; the run failed with an error
on ``--batch-size`` the user, who chose no batch size of 1, had to read to learn the fix.
Points the user gave, or ``--batch-size 1``, keep that error; a model that trains on one
sample is fitted from 1,2,4 without a note, as before."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

import danlu
import danlu.estimate.memory as memory
from danlu.cli.estimate import LONE_SAMPLE_ROW
from danlu.cli.main import app
from danlu.core.errors import SpecError

pytest.importorskip("torch")

MODELS = textwrap.dedent(
    """
    import torch
    from torch import nn


    def _factory(model):
        def make_batch(b):
            return torch.randn(b, 8), torch.randint(0, 3, (b,))

        def loss_fn(model, batch):
            return nn.functional.cross_entropy(model(batch[0]), batch[1])

        return model, make_batch, loss_fn


    def batch_norm():
        return _factory(nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Linear(16, 3)))


    def plain():
        return _factory(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)))
    """
)


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A module of tiny models in the current directory (where the tracer imports from),
    and the tracer subprocess importing the ``danlu`` this test imports."""
    (tmp_path / "lone_sample_cli_models.py").write_text(MODELS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(Path(danlu.__file__).resolve().parents[1]))
    return tmp_path


def _estimate(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, ["estimate", *args, "--target", "cpu"])
    return res.exit_code, res.stdout, res.stderr


def test_default_points_move_to_two_for_a_batch_norm_model(models: Path) -> None:
    code, out, err = _estimate("lone_sample_cli_models:batch_norm", "--max-batch", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["fit"]["points"] == [2, 4, 8]
    assert result["batch_size"] == 8
    note = [line for line in err.splitlines() if line.strip()]
    assert len(note) == 1, err  # one line
    assert "cannot train on a batch of 1 sample" in note[0]
    assert "--fit-points 2,4,8" in note[0]


def test_sweep_with_a_batch_size_keeps_it_among_the_points(models: Path) -> None:
    code, out, err = _estimate(
        "lone_sample_cli_models:batch_norm", "--batch-size", "3", "--sweep", "3,6"
    )
    assert code == 0, err
    assert "fitted from b = 2,3,4,8" in " ".join(out.split())
    assert "--fit-points 2,4,8" in err


@pytest.mark.parametrize(
    "args",
    [["--max-batch", "--fit-points", "1,2,4"], ["--max-batch", "--batch-size", "1"]],
    ids=["given-points", "batch-size-1"],
)
def test_a_batch_of_one_the_user_chose_is_still_an_error(models: Path, args: list[str]) -> None:
    code, out, err = _estimate("lone_sample_cli_models:batch_norm", *args)
    assert code == 2
    assert out == ""
    assert "--batch-size" in err and "cannot train on a batch of 1 sample" in err
    assert "note:" not in err


def test_a_model_that_trains_on_one_sample_is_fitted_from_one(models: Path) -> None:
    code, out, err = _estimate("lone_sample_cli_models:plain", "--max-batch", "--json")
    assert code == 0, err
    assert json.loads(out)["fit"]["points"] == [1, 2, 4]
    assert err == ""


def _refusing_one(error: SpecError) -> object:
    """The real tracer, but a request holding batch 1 raises ``error``."""
    real = memory.trace

    def fake(req: memory.TraceRequest, *args: object, **kwargs: object) -> object:
        if 1 in req.batch_sizes:
            raise error
        return real(req, *args, **kwargs)  # type: ignore[arg-type]

    return fake


def test_the_condition_is_known_by_its_type_not_its_words(
    models: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tracer's refusal reworded: still the fallback to 2,4,8 (the cli compared the
    message with a constant)."""
    monkeypatch.setattr(memory, "trace", _refusing_one(memory.LoneSampleError("too few")))
    code, out, err = _estimate("lone_sample_cli_models:plain", "--max-batch", "--json")
    assert code == 0, err
    assert json.loads(out)["fit"]["points"] == [2, 4, 8]
    assert "--fit-points 2,4,8" in err


def test_another_batch_size_error_is_not_the_condition(
    models: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain error on ``--batch-size`` is reported, whatever it says."""
    words = "lone_sample_cli_models:plain cannot train on a batch of 1 sample (other)"
    monkeypatch.setattr(memory, "trace", _refusing_one(SpecError("--batch-size", words)))
    code, out, err = _estimate("lone_sample_cli_models:plain", "--max-batch", "--json")
    assert code == 2
    assert out == ""
    assert "error: --batch-size: " + words in err
    assert "note:" not in err


def test_a_sweep_row_of_one_sample_is_refused(models: Path) -> None:
    """The fit from 2,4,8 answers b=1 too: the row said "fits" for a batch the model
    cannot train on."""
    code, out, err = _estimate("lone_sample_cli_models:batch_norm", "--sweep", "1,2", "--json")
    assert code == 0, err
    rows = {r["batch_size"]: r for r in json.loads(out)["sweep"]}
    assert rows[1] == {"batch_size": 1, "error": LONE_SAMPLE_ROW}
    assert rows[2]["fits"] is True
