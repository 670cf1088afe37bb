"""A stopped run's log names why it is stopped: the control plane's reason (a cancel, a time
limit, a preemption...), Slurm's time limit, or a neutral ``stop requested (SIGTERM)``. Before,
every SIGTERM was logged as ``preemption requested: checkpointing at step N and exiting with
75``, a cancel's and a time limit's too."""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.train.env import JobEnv
from danlu.train.preempt import Preempted, Preemption


@contextmanager
def _control_plane(
    answer: dict[str, Any] | None, asked: list[tuple[str, str]], hold: threading.Event | None
) -> Iterator[str]:
    """A fake API (a thread) answering ``GET .../stopping`` with ``answer`` (after ``hold`` is
    set, when given) and metrics POSTs as the API does; every GET's path and Authorization
    header go to ``asked``. Yields its URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append((self.path, self.headers.get("Authorization", "")))
            if hold is not None:
                hold.wait(30)
            self._reply(json.dumps(answer).encode())

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            self._reply(json.dumps({"accepted": len(body["metrics"]), "batch_size": None}).encode())

        def _reply(self, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        if hold is not None:
            hold.set()
        server.shutdown()
        server.server_close()


def _sigterm_at_step_two(environ: dict[str, str], directory: Path) -> str:
    """Train a tiny model under ``environ``, SIGTERM this process after step 2; the stop's
    WARNING lines (the run must exit 75 at step 3)."""
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    keep = Keep(logging.WARNING)
    logging.getLogger("danlu.train").addHandler(keep)
    try:
        with (
            pytest.raises(Preempted) as stopped,
            dt.init(
                model,
                opt,
                global_batch_size=8,
                dataset_size=64,
                checkpoint_dir=str(directory),
                metrics_file=False,
                environ=environ,
                report_interval_s=60,
            ) as ctx,
        ):
            for batch in ctx.batches(tiny_regression(64)):
                ctx.step(batch, mse_loss)
                if ctx.step_num == 2:
                    signal.raise_signal(signal.SIGTERM)  # the handler is ctx's
    finally:
        logging.getLogger("danlu.train").removeHandler(keep)
    assert stopped.value.code == dt.PREEMPTED_EXIT_CODE == 75
    return "\n".join(records)


def _stop_cause() -> Any:
    """:mod:`danlu.train.stop_cause` (imported here: the tests of the log lines above run
    through ``dt.init`` alone)."""
    from danlu.train import stop_cause

    return stop_cause


def _on_cluster(url: str) -> dict[str, str]:
    return {"DANLU_API_URL": url, "DANLU_JOB_ID": "3f2a9c01d2e4", "DANLU_TOKEN": "dl_run_token"}


@pytest.mark.parametrize(
    "reason", ["cancelled by alice", "time limit reached: ran 2h of 2h", "preempted: outranked"]
)
def test_the_log_names_the_control_planes_reason(tmp_path: Path, reason: str) -> None:
    asked: list[tuple[str, str]] = []
    with _control_plane({"id": "3f2a9c01d2e4", "reason": reason}, asked, None) as url:
        said = _sigterm_at_step_two(_on_cluster(url), tmp_path)
    assert f"stop requested ({reason}): checkpointing at step 3 and exiting with 75" in said
    assert "preemption" not in said.replace(reason, "")
    # asked once, with the run's own token, of its own job
    assert asked == [("/api/v1/jobs/3f2a9c01d2e4/stopping", "Bearer dl_run_token")]


def test_a_sigterm_the_control_plane_did_not_send_is_said_neutrally(tmp_path: Path) -> None:
    asked: list[tuple[str, str]] = []
    with _control_plane({"id": "3f2a9c01d2e4", "reason": None}, asked, None) as url:
        said = _sigterm_at_step_two(_on_cluster(url), tmp_path / "a")
    assert "stop requested (SIGTERM): checkpointing at step 3 and exiting with 75" in said
    assert "preemption" not in said and len(asked) == 1
    # off the cluster (no API) alike, asking nothing
    said = _sigterm_at_step_two({}, tmp_path / "b")
    assert "stop requested (SIGTERM): checkpointing at step 3 and exiting with 75" in said


def test_slurms_time_limit_is_named_when_its_end_time_has_passed(tmp_path: Path) -> None:
    """A SIGTERM at or after ``SLURM_JOB_END_TIME`` that the control plane did not send is
    Slurm's time limit (an admin's ``--time`` or the partition's ``MaxTime``)."""
    ended = {"SLURM_JOB_END_TIME": str(int(time.time()) - 60)}
    said = _sigterm_at_step_two(ended, tmp_path)
    limit = "Slurm's time limit: the job's end time (SLURM_JOB_END_TIME) has passed"
    assert f"stop requested ({limit}): checkpointing at step 3" in said
    cause = _stop_cause().StopCause(slurm_end_time=1_000_000.0)
    assert cause.reason(signalled_at=1_000_030.0) == limit
    assert cause.reason(signalled_at=999_000.0) is None  # long before it: another stop
    assert cause.reason(signalled_at=None) is None  # no signal of this rank's


def test_slurms_end_time_is_read_leniently() -> None:
    assert JobEnv.from_environ({"SLURM_JOB_END_TIME": " 1700000000\r"}).slurm_job_end_time == (
        1_700_000_000.0
    )
    # Slurm's variable, not danlu's: an odd value names no stop, and fails no start
    for odd in ("Unknown", "-1", "1.5e9", "", "9" * 40):
        assert JobEnv.from_environ({"SLURM_JOB_END_TIME": odd}).slurm_job_end_time is None


def test_a_slow_control_plane_does_not_hold_the_checkpoint() -> None:
    """The answer is waited for at most the cause's timeout from the step boundary; the
    signal handler itself asks nothing (no I/O there)."""
    asked: list[tuple[str, str]] = []
    hold = threading.Event()
    with _control_plane({"reason": "cancelled by alice"}, asked, hold) as url:
        cause = _stop_cause().StopCause(f"{url}/api/v1/jobs/j/stopping", "t", timeout_s=0.05)
        preemption = Preemption(install=False, cause=cause)
        preemption._on_signal(signal.SIGTERM, None)
        assert asked == []  # the handler sent nothing
        assert preemption.should_stop(1)
        assert preemption.said() == "stop requested (SIGTERM)"  # the server still holds it
        assert len(asked) == 1


def test_a_rank_that_agreed_to_anothers_stop_says_so() -> None:
    """In a distributed run the ranks stop together; one that was not signalled itself
    says why all the same: the control plane's reason, else that another rank was."""
    agreeing = SimpleNamespace(enabled=True, any=lambda flag: True)
    preemption = Preemption(agreeing, install=False)  # type: ignore[arg-type]
    assert preemption.should_stop(1)
    assert preemption.said() == "stop requested (another rank was signalled)"
    asked: list[tuple[str, str]] = []
    with _control_plane({"reason": "its node n1 is being drained"}, asked, None) as url:
        cause = _stop_cause().StopCause(f"{url}/api/v1/jobs/j/stopping", "t")
        told = Preemption(agreeing, install=False, cause=cause)  # type: ignore[arg-type]
        assert told.should_stop(1)
        assert told.said() == "stop requested (its node n1 is being drained)"
    own = Preemption(install=False)
    own.request()  # the script's own trigger, no signal
    assert own.should_stop(1) and own.said() == "stop requested"


def test_a_reason_with_control_characters_stays_on_one_line() -> None:
    asked: list[tuple[str, str]] = []
    with _control_plane({"reason": "cancelled\nby \x1b[31malice" + "x" * 500}, asked, None) as url:
        cause = _stop_cause().StopCause(f"{url}/api/v1/jobs/j/stopping", "t")
        said = cause.reason(signalled_at=time.time())
    assert said is not None and said.startswith("cancelled by  [31malice")
    assert said.isprintable() and len(said) == 300
