"""Edges of training: resuming a checkpoint of another model, optimizer or precision;
a ``DANLU_API_URL`` without a scheme and metrics lost without a warning; ``init`` arguments
of the wrong type; a preemption on a periodic checkpoint's step writing it twice; impossible
environment values; the micro-batch following a launch's larger global batch; a preemption
without a checkpoint directory."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.core.errors import ConfigError
from danlu.train.env import JobEnv
from danlu.train.report import MetricsReporter
from danlu.train.state import capture_state, restore_state


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(8, 8, generator=g), torch.randn(8, 1, generator=g)


def _train(
    directory: Path,
    steps: int,
    *,
    model: torch.nn.Module | None = None,
    adam: bool = False,
    **kw: Any,
) -> dt.TrainContext:
    model = model if model is not None else tiny_model()
    opt: torch.optim.Optimizer = (
        torch.optim.Adam(model.parameters(), lr=0.01)
        if adam
        else torch.optim.SGD(model.parameters(), lr=0.01)
    )
    kw.setdefault("checkpoint_every_steps", 1)
    ctx = dt.init(
        model,
        opt,
        global_batch_size=8,
        checkpoint_dir=str(directory),
        metrics_file=False,
        environ={},
        **kw,
    )
    for _ in range(steps):
        ctx.step(_batch(), mse_loss)
    ctx.close()
    return ctx


# ---------------------------------------------------------------- 1: resume compatibility
def test_resuming_with_another_optimizer_names_the_checkpoint_and_the_fix(tmp_path: Path) -> None:
    _train(tmp_path, 2)
    with pytest.raises(ConfigError) as err:  # KeyError: 'betas' at the first step before
        _train(tmp_path, 1, adam=True)
    text = str(err.value)
    assert str(tmp_path) in text and "SGD" in text and "Adam" in text
    assert "checkpoint_dir" in text and "resume=False" in text


def test_resuming_with_another_model_shape_names_the_checkpoint_and_the_fix(
    tmp_path: Path,
) -> None:
    _train(tmp_path, 2)
    wider = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    with pytest.raises(ConfigError) as err:  # torch's size-mismatch RuntimeError before
        _train(tmp_path, 1, model=wider)
    text = str(err.value)
    assert str(tmp_path) in text and "shape" in text and "[16, 8]" in text
    assert "resume=False" in text


def test_an_old_checkpoint_of_another_optimizer_is_told_by_its_groups() -> None:
    model = tiny_model()
    state = capture_state(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    state.pop("optimizer_class", None)  # written before the class was recorded
    with pytest.raises(ConfigError, match="momentum"):
        restore_state(state, model, torch.optim.Adam(model.parameters()))


def test_a_scheduler_the_checkpoint_lacks_is_a_config_error() -> None:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    state = capture_state(model, opt)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2)
    with pytest.raises(ConfigError, match="scheduler"):
        restore_state(state, model, opt, sched)


def test_an_fp32_checkpoint_resumes_in_fp16_with_a_fresh_loss_scale(tmp_path: Path) -> None:
    _train(tmp_path, 2, precision="fp32")
    ctx = _train(tmp_path, 1, precision="fp16")  # DataError on every restart before
    assert ctx.step_num == 3


# ---------------------------------------------------------------- 2: API URL, lost metrics
@pytest.mark.parametrize("url", ["127.0.0.1:8000", "localhost:8000", "ftp://h/", "http://"])
def test_an_api_url_without_http_scheme_and_host_is_refused(url: str) -> None:
    with pytest.raises(ConfigError, match="DANLU_API_URL"):
        JobEnv.from_environ({"DANLU_API_URL": url, "DANLU_JOB_ID": "j1"})


def test_a_failing_metrics_post_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    reporter = MetricsReporter(url="http://127.0.0.1:9/api/v1/jobs/j/metrics", timeout_s=1.0)
    with caplog.at_level(logging.DEBUG, logger="danlu.train"):
        for step in range(3):
            reporter.report({"step": step, "loss": 1.0})
            reporter.flush()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "metrics cannot be shipped" in warnings[0].getMessage()
    assert reporter.errors == 3 and reporter.sent == 0


# ---------------------------------------------------------------- 3: init argument types
@pytest.mark.parametrize(
    ("bad", "name"),
    [
        ({"global_batch_size": 2.5}, "global_batch_size"),
        ({"global_batch_size": "8"}, "global_batch_size"),
        ({"global_batch_size": True}, "global_batch_size"),
        ({"micro_batch_size": 2.5}, "micro_batch_size"),
        ({"dataset_size": 10.5}, "dataset_size"),
        ({"warmup_steps": math.nan}, "warmup_steps"),
        ({"keep_last": 2.0}, "keep_last"),
        ({"anomaly_k": "6"}, "anomaly_k"),
    ],
)
def test_init_arguments_of_the_wrong_type_are_refused_by_name(
    bad: dict[str, Any], name: str
) -> None:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    kw: dict[str, Any] = {"global_batch_size": 8, **bad}
    with pytest.raises(ConfigError, match=name):
        dt.init(model, opt, environ={}, metrics_file=False, **kw)


# ---------------------------------------------------------------- 4: one checkpoint a step
@pytest.mark.parametrize("async_checkpoint", [False, True])
def test_a_preemption_on_a_periodic_checkpoint_step_writes_it_once(
    tmp_path: Path, async_checkpoint: bool
) -> None:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ctx = dt.init(
        model,
        opt,
        global_batch_size=8,
        checkpoint_dir=str(tmp_path),
        checkpoint_every_steps=2,
        async_checkpoint=async_checkpoint,
        metrics_file=False,
        environ={},
    )
    ctx.step(_batch(), mse_loss)
    ctx.preemption.request()
    with pytest.raises(SystemExit) as stop:
        ctx.step(_batch(), mse_loss)  # step 2: periodic, and the preemption's
    assert stop.value.code == dt.PREEMPTED_EXIT_CODE
    assert len(list(tmp_path.glob("ckpt-000000000002-*"))) == 1


# ---------------------------------------------------------------- 5: impossible env values
@pytest.mark.parametrize(
    ("environ", "name"),
    [
        ({"WORLD_SIZE": "0"}, "WORLD_SIZE"),
        ({"LOCAL_WORLD_SIZE": "0"}, "LOCAL_WORLD_SIZE"),
        ({"LOCAL_WORLD_SIZE": "-3"}, "LOCAL_WORLD_SIZE"),
        ({"LOCAL_RANK": "-1"}, "LOCAL_RANK"),
        ({"LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "2"}, "LOCAL_RANK"),
        ({"DANLU_RESTART_COUNT": "-5"}, "DANLU_RESTART_COUNT"),
        ({"TORCHELASTIC_RESTART_COUNT": "-1"}, "TORCHELASTIC_RESTART_COUNT"),
        ({"DANLU_TRIAL": "-1"}, "DANLU_TRIAL"),
        ({"DANLU_ARRAY_INDEX": "-1"}, "DANLU_ARRAY_INDEX"),
        ({"MASTER_PORT": "99999"}, "MASTER_PORT"),
        ({"MASTER_PORT": "0"}, "MASTER_PORT"),
        ({"DANLU_CHECKPOINT_DIR": "  "}, "DANLU_CHECKPOINT_DIR"),
        ({"DANLU_JOB_ID": " "}, "DANLU_JOB_ID"),
    ],
)
def test_impossible_environment_values_are_refused_by_name(
    environ: dict[str, str], name: str
) -> None:
    with pytest.raises(ConfigError, match=name):
        JobEnv.from_environ(environ)


# ---------------------------------------------------------------- 6: micro-batch follows
def test_without_a_micro_batch_a_launch_batch_trains_in_one_micro_batch() -> None:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with dt.init(
        model,
        opt,
        global_batch_size=8,
        metrics_file=False,
        environ={"DANLU_GLOBAL_BATCH_SIZE": "32"},
    ) as ctx:
        assert (ctx.batch.global_batch, ctx.batch.micro, ctx.batch.accumulation) == (32, 32, 1)
        ctx.batch.on_oom()  # an OOM caps it from then on
        ctx.batch.set_global(64)
        assert (ctx.batch.micro, ctx.batch.accumulation) == (16, 4)
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with dt.init(  # a given micro-batch still caps it
        model,
        opt,
        global_batch_size=8,
        micro_batch_size=8,
        metrics_file=False,
        environ={"DANLU_GLOBAL_BATCH_SIZE": "32"},
    ) as ctx:
        assert (ctx.batch.micro, ctx.batch.accumulation) == (8, 4)


# ---------------------------------------------------------------- 7: preempt without a dir
def test_a_preemption_without_a_checkpoint_dir_warns_that_nothing_was_written(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ctx = dt.init(model, opt, global_batch_size=8, metrics_file=False, environ={})
    ctx.preemption.request()
    data = tiny_regression(8)
    with caplog.at_level(logging.WARNING, logger="danlu.train"), pytest.raises(SystemExit) as stop:
        ctx.step(data.tensors, mse_loss)
    assert stop.value.code == dt.PREEMPTED_EXIT_CODE
    assert "no checkpoint is written" in caplog.text
    assert "checkpointing at step" not in caplog.text
