"""A job's log truncated while its run writes to it (``truncate -s 0``, logrotate's
``copytruncate``: the log of a job that writes megabytes a second filling the disk): the run
goes on writing from the start of the file, below where its output began (its launch
record's ``log_offset``, the log's length at the launch). The end of its log, read from that
offset, was empty: a CUDA out-of-memory error it printed then was not seen, and the run was
reported FAILED, not OOM."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from danlu.core.cluster import Cluster
from danlu.executors import JobLaunch, LocalExecutor, Outcome, records

OOM_AFTER_GO = (
    "import pathlib, sys, time\n"
    "print('x' * 4096, flush=True)\n"
    "while not pathlib.Path(sys.argv[1]).exists():\n"
    "    time.sleep(0.02)\n"
    "print('torch.OutOfMemoryError: CUDA out of memory.', flush=True)\n"
    "sys.exit(1)\n"
)


def _ended(ex: LocalExecutor, job: JobLaunch) -> Outcome | None:
    handle = ex.submit(job)
    deadline = time.monotonic() + 30
    while (status := ex.poll(handle)).running:
        assert time.monotonic() < deadline, "the run never ended"
        time.sleep(0.02)
    return status.outcome


def test_an_oom_written_after_the_log_was_truncated_is_seen(tmp_path: Path) -> None:
    ex = LocalExecutor(Cluster.homogeneous(1, 1), tmp_path / "state", base_env={})
    earlier = JobLaunch("trunc", (sys.executable, "-c", "print('y' * 65536)"))
    assert _ended(ex, earlier) is Outcome.SUCCEEDED  # the log is 64 KiB long now
    go = tmp_path / "go"
    log = tmp_path / "state" / "logs" / "trunc.log"
    job = JobLaunch("trunc", (sys.executable, "-c", OOM_AFTER_GO, str(go)), attempt=1)
    handle = ex.submit(job)
    deadline = time.monotonic() + 30
    while log.stat().st_size < 65537 + 4097:
        assert time.monotonic() < deadline, "the run never wrote"
        time.sleep(0.02)
    log.write_bytes(b"")  # truncated (the run's descriptor appends from the start now)
    go.touch()
    while (status := ex.poll(handle)).running:
        assert time.monotonic() < deadline, "the run never ended"
        time.sleep(0.02)
    assert b"CUDA out of memory" in log.read_bytes()
    assert status.outcome is Outcome.OOM


def test_the_tail_of_a_log_shorter_than_the_runs_start_is_all_of_it(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_bytes(b"written after a truncation\n")
    assert records.log_tail(log, 1 << 20) == "written after a truncation\n"
    assert records.log_tail(log, 5) == "en after a truncation\n"  # not truncated: from 5
