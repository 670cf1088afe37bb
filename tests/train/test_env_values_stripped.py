"""Every job-environment variable is read without the whitespace around it: a ``\\r`` kept from
an env file edited on Windows (or a blank from a launcher's template) made a checkpoint
directory named ``ckpt\\r``, a metrics file ``m.jsonl\\r`` and a rendezvous host ``host\\r``.
A name or path of only whitespace is refused naming the variable."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.core.errors import ConfigError
from danlu.train.env import JobEnv


@pytest.mark.parametrize(
    ("variable", "attribute", "raw", "expected"),
    [
        ("DANLU_CHECKPOINT_DIR", "checkpoint_dir", "/data/ckpt\r", "/data/ckpt"),
        ("DANLU_CHECKPOINT_DIR", "checkpoint_dir", " s3://b/run\r\n", "s3://b/run"),
        ("DANLU_METRICS_FILE", "metrics_file", "/data/m.jsonl\r", "/data/m.jsonl"),
        ("DANLU_METRICS_FILE", "metrics_file", "\tm.jsonl ", "m.jsonl"),
        ("DANLU_SWEEP_ID", "sweep_id", "sw1\r", "sw1"),
        ("MASTER_ADDR", "master_addr", "node-0\r", "node-0"),
        ("TORCHELASTIC_RUN_ID", "elastic_run_id", " run7\r", "run7"),
    ],
)
def test_a_name_or_path_is_read_without_surrounding_whitespace(
    variable: str, attribute: str, raw: str, expected: str
) -> None:
    assert getattr(JobEnv.from_environ({variable: raw}), attribute) == expected


@pytest.mark.parametrize(
    "variable",
    [
        "DANLU_CHECKPOINT_DIR",
        "DANLU_METRICS_FILE",
        "DANLU_SWEEP_ID",
        "MASTER_ADDR",
        "TORCHELASTIC_RUN_ID",
        "DANLU_HPARAMS",
        "DANLU_API_URL",
        "DANLU_JOB_ID",
    ],
)
@pytest.mark.parametrize("raw", ["\r", " \r\n", "\t"])
def test_a_name_or_path_of_only_whitespace_is_refused_by_name(variable: str, raw: str) -> None:
    with pytest.raises(ConfigError, match=f"{variable}=.* is only whitespace"):
        JobEnv.from_environ({variable: raw})


@pytest.mark.parametrize(
    ("variable", "attribute", "raw", "expected"),
    [
        ("DANLU_BATCH_SIZE", "batch_size", "8\r", 8),
        ("DANLU_GPU_MEMORY_LIMIT", "gpu_memory_limit", "8GiB\r", 8 * 1024**3),
        ("DANLU_PRECISION", "precision", "bf16\r", "bf16"),
        ("DANLU_HPARAMS", "hparams", '{"lr": 0.1}\r\n', {"lr": 0.1}),
        ("DANLU_API_URL", "api_url", "http://h:8000/\r", "http://h:8000"),
    ],
)
def test_other_values_are_read_without_surrounding_whitespace(
    variable: str, attribute: str, raw: str, expected: object
) -> None:
    assert getattr(JobEnv.from_environ({variable: raw}), attribute) == expected


def test_checkpoints_and_metrics_go_where_the_variables_name_without_the_line_ending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    ckpt = tmp_path / "ckpt"
    metrics = tmp_path / "m.jsonl"
    environ = {"DANLU_CHECKPOINT_DIR": f"{ckpt}\r", "DANLU_METRICS_FILE": f"{metrics}\r"}
    data = tiny_regression(8)
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with dt.init(
        model, opt, global_batch_size=4, dataset_size=len(data), progress=False, environ=environ
    ) as ctx:
        for batch in ctx.batches(data):
            ctx.step(batch, mse_loss)
        ctx.save()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "m.jsonl"]
    assert any(ckpt.iterdir())
    assert metrics.read_text().strip()
