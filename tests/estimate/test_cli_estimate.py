"""``danlu estimate`` end to end (one real trace per test, small models)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app

pytest.importorskip("torch")


def test_json_sweep_and_max_batch() -> None:
    res = CliRunner().invoke(
        app,
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
            "1GiB",
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
    assert out["max_batch_capped"] is False  # 1 GiB is reached below 32 x 16


def test_table_output_and_flag_errors() -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["estimate", "danlu.estimate.zoo:mlp_small", "-b", "4"])
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
        res = runner.invoke(app, ["estimate", "danlu.estimate.zoo:mlp_small", *bad, *args])
        assert res.exit_code == 2, (args, res.output)
        assert flag in res.output


def test_a_max_batch_at_the_search_cap_is_reported_as_a_lower_bound() -> None:
    """mlp_small fits far more than 32 x 4 samples on an H100: the answer is where the search
    stopped, not the largest safe batch."""
    runner = CliRunner()
    args = ["estimate", "danlu.estimate.zoo:mlp_small", "--max-batch", "--fit-points", "1,2,4"]
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert (out["max_batch"], out["max_batch_capped"]) == (128, True)
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    text = " ".join(res.stdout.split())
    assert "at least 128 (the search stops at 32x the largest traced batch" in text
    assert "trace larger --fit-points" in text


def test_gpu_memory_is_the_limit_of_every_verdict() -> None:
    """``-b 4 --gpu-memory 100MiB --sweep 2,4``: the sweep said OOM at b=4 and the main
    verdict "fits" (against the H100's capacity)."""
    runner = CliRunner()
    args = ["estimate", "danlu.estimate.zoo:mlp_small", "-b", "4", "--gpu-memory", "100MiB"]
    res = runner.invoke(app, [*args, "--sweep", "2,4", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["peak_device_bytes"] > 100 << 20
    assert out["fits"] is False
    assert (out["limit_bytes"], out["limit_source"]) == (100 << 20, "--gpu-memory")
    assert {r["batch_size"]: r["fits"] for r in out["sweep"]} == {2: False, 4: False}
    assert out["capacity_bytes"] > 70 << 30  # the H100's, still reported
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "does NOT fit within 100.0MiB (--gpu-memory) on h100" in res.stdout
    plain = runner.invoke(app, ["estimate", "danlu.estimate.zoo:mlp_small", "-b", "4"])
    assert "fits within 79.2GiB (capacity) on h100" in plain.stdout
