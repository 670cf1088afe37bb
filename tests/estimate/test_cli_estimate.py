"""``danlu estimate`` end to end (one real trace per test, small models)."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from danlu.cli.estimate import register

pytest.importorskip("torch")


def _app() -> typer.Typer:
    app = typer.Typer()
    register(app)

    @app.callback()
    def _root() -> None:  # keep "estimate" a subcommand
        pass

    return app


def test_json_sweep_and_max_batch() -> None:
    res = CliRunner().invoke(
        _app(),
        [
            "estimate",
            "danlu.estimate.zoo:gpt2_tiny",
            "--batch-size",
            "8",
            "--precision",
            "bf16",
            "--gpu",
            "a100-40gb",
            "--sweep",
            "8,16,100000",
            "--fit-points",
            "4,8,16",
            "--max-batch",
            "--gpu-memory",
            "2GiB",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert isinstance(out["peak_logical_bytes"], int)
    assert isinstance(out["peak_reserved_bytes"], int)
    assert out["peak_reserved_bytes"] >= out["peak_logical_bytes"] > 0
    assert out["gpu"] == "a100-40gb"
    assert out["family"] == "transformer"
    sweep = {r["batch_size"]: r for r in out["sweep"]}
    assert sweep[8]["peak_logical_bytes"] == pytest.approx(out["peak_logical_bytes"], rel=0.01)
    assert "error" in sweep[100000]  # far outside the fitted range: refused
    mb = out["max_batch"]
    assert mb is not None and mb > 8


def test_table_output_and_flag_errors() -> None:
    runner = CliRunner()
    res = runner.invoke(_app(), ["estimate", "danlu.estimate.zoo:mlp_small", "-b", "4"])
    assert res.exit_code == 0, res.output
    assert "peak reserved" in res.stdout and "optimizer_state" in res.stdout
    assert "model family (for GPU sharing): none recognised" in res.stdout  # an MLP
    for args, flag in (
        (["--precision", "fp8"], "--precision"),
        (["--sweep", "1,x"], "--sweep"),
        (["--gpu", "k80"], "GPU type"),
        ([], "--batch-size"),
        (["--max-batch", "--gpu-memory", "lots"], "--gpu-memory"),
    ):
        bad = ["-b", "2"] if args and flag != "--batch-size" else []
        res = runner.invoke(_app(), ["estimate", "danlu.estimate.zoo:mlp_small", *bad, *args])
        assert res.exit_code == 2, (args, res.output)
        assert flag in res.output
