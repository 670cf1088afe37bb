"""Job settings written as people write them elsewhere in danlu: ``DANLU_GPU_MEMORY_LIMIT``
with a unit (``8GB``, refused as "not an integer" before), precision and anomaly-action names
in any case (``"BF16"`` was refused while ``"bf16"`` was accepted), and a
``DANLU_METRICS_FILE`` of only blanks refused by name as ``DANLU_CHECKPOINT_DIR`` is (it was
taken as the path of a file named by blanks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.core.errors import ConfigError
from danlu.train.amp import Precision
from danlu.train.anomaly import AnomalyDetector
from danlu.train.env import JobEnv


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("8GB", 8 * 1000**3),
        ("8GiB", 8 * 1024**3),
        ("8gib", 8 * 1024**3),
        (" 512MiB ", 512 * 1024**2),
        ("1.5GB", 1_500_000_000),
        ("21474836480", 21474836480),  # what the executors write
        (" 1024 ", 1024),
    ],
)
def test_the_gpu_memory_limit_takes_a_unit(raw: str, expected: int) -> None:
    env = JobEnv.from_environ({"DANLU_GPU_MEMORY_LIMIT": raw})
    assert env.gpu_memory_limit == expected


@pytest.mark.parametrize("raw", ["8XB", "lots", "8 G B", "-8GB"])
def test_a_gpu_memory_limit_that_is_no_size_says_what_to_write(raw: str) -> None:
    with pytest.raises(ConfigError, match="DANLU_GPU_MEMORY_LIMIT") as caught:
        JobEnv.from_environ({"DANLU_GPU_MEMORY_LIMIT": raw})
    assert "GiB" in str(caught.value)  # the units it takes


@pytest.mark.parametrize("raw", ["0", "0GB", "-1"])
def test_a_gpu_memory_limit_of_nothing_is_refused(raw: str) -> None:
    with pytest.raises(ConfigError, match=r"DANLU_GPU_MEMORY_LIMIT.*positive"):
        JobEnv.from_environ({"DANLU_GPU_MEMORY_LIMIT": raw})


@pytest.mark.parametrize("raw", ["", None])
def test_an_unset_gpu_memory_limit_is_none(raw: str | None) -> None:
    environ = {} if raw is None else {"DANLU_GPU_MEMORY_LIMIT": raw}
    assert JobEnv.from_environ(environ).gpu_memory_limit is None


@pytest.mark.parametrize("raw", ["   ", "\t\n"])
def test_a_blank_metrics_file_is_refused_by_name(raw: str) -> None:
    with pytest.raises(ConfigError, match=r"DANLU_METRICS_FILE.*whitespace"):
        JobEnv.from_environ({"DANLU_METRICS_FILE": raw})


def test_an_empty_metrics_file_is_unset_and_a_path_is_kept() -> None:
    assert JobEnv.from_environ({"DANLU_METRICS_FILE": ""}).metrics_file is None
    kept = JobEnv.from_environ({"DANLU_METRICS_FILE": "/tmp/m.jsonl"}).metrics_file
    assert kept == "/tmp/m.jsonl"


@pytest.mark.parametrize(
    ("name", "dtype", "scaling"),
    [
        ("BF16", torch.bfloat16, False),
        ("Bf16", torch.bfloat16, False),
        ("FP16", torch.float16, True),
        (" fp16 ", torch.float16, True),
        ("FP32", None, False),
        ("fp32", None, False),
        ("16", torch.float16, True),
    ],
)
def test_precision_names_are_read_in_any_case(
    name: str, dtype: torch.dtype | None, scaling: bool
) -> None:
    precision = Precision(name, "cpu")
    assert (precision.dtype, precision.scaling) == (dtype, scaling)
    assert precision.name == name.strip().lower()


@pytest.mark.parametrize("name", ["bfloat16", "fp8", "", None])
def test_an_unknown_precision_is_refused_naming_the_spellings(name: object) -> None:
    with pytest.raises(ConfigError, match="precision must be one of fp32, 32, fp16, 16, bf16"):
        Precision(name, "cpu")  # type: ignore[arg-type]


@pytest.mark.parametrize("action", ["Skip", "ROLLBACK", " warn ", "Stop"])
def test_anomaly_actions_are_read_in_any_case(action: str) -> None:
    assert AnomalyDetector(action).action == action.strip().lower()


def test_an_unknown_anomaly_action_is_refused_naming_the_actions() -> None:
    with pytest.raises(ConfigError, match="skip, rollback, stop, warn"):
        AnomalyDetector("ignore")


def _init(**kwargs: object) -> dt.TrainContext:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    return dt.init(model, opt, global_batch_size=4, progress=False, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("argument", ["checkpoint_dir", "metrics_file"])
def test_a_blank_path_argument_is_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argument: str
) -> None:
    """It made a directory or file named by blanks in the working directory."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=f"{argument}=' ' is only whitespace"):
        _init(**{argument: " "}, environ={})
    assert list(tmp_path.iterdir()) == []


def test_an_empty_metrics_file_argument_is_none_given(tmp_path: Path) -> None:
    """``metrics_file=""`` was ``Path("")``, the working directory: no record was written;
    now ``DANLU_METRICS_FILE`` (else the default) is used, as for ``None``."""
    target = tmp_path / "m.jsonl"
    data = tiny_regression(8)
    environ = {"DANLU_METRICS_FILE": str(target)}
    with _init(metrics_file="", dataset_size=len(data), environ=environ) as ctx:
        for batch in ctx.batches(data):
            ctx.step(batch, mse_loss)
            break
    records = [json.loads(line) for line in target.read_text().splitlines() if line.strip()]
    assert records and "loss" in records[0]


@pytest.mark.parametrize(
    "raw",
    ["8_000_000_000", "٨٠٠٠", "1" + "0" * 400, "9" * 19],
    ids=["underscores", "other-digits", "400-digits", "19-digits"],
)
def test_a_gpu_memory_limit_only_int_read_is_refused_by_name(raw: str) -> None:
    """``int()`` read these (``1_000`` and another script's digits as numbers; a
    400-digit count failed later with a bare ``OverflowError`` when the CUDA memory fraction
    was worked out); they are refused as any other value that is no size."""
    with pytest.raises(ConfigError, match="DANLU_GPU_MEMORY_LIMIT"):
        JobEnv.from_environ({"DANLU_GPU_MEMORY_LIMIT": raw})


@pytest.mark.parametrize(("raw", "expected"), [("+8", 8), ("9" * 18, int("9" * 18))])
def test_a_gpu_memory_limit_of_plain_digits_is_still_read(raw: str, expected: int) -> None:
    assert JobEnv.from_environ({"DANLU_GPU_MEMORY_LIMIT": raw}).gpu_memory_limit == expected
