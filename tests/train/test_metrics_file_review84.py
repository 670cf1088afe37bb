"""danlu.train's JSONL metrics file.

1. A run killed while it appended left half a record at the file's end; the next run's first
   record was appended to it: one line no JSON reader takes, the new record lost with it.
   The half line is cut off now (a whole record without its line end is ended instead).
2. A write that failed part way was cut back to the end read before it, taking away the
   lines another writer (a second run in the same directory, sharing
   ``danlu-metrics.jsonl``) appended meanwhile. Every change is made under an exclusive
   ``flock`` now, so no other writer's line lands in the part cut back.
3. A run resumed from a checkpoint redoes the steps after it, and their records were in the
   file twice (the old run's, then the new's). The file loses the old run's records of
   those steps as the run resumes.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.train.report import MetricsReporter


def _lines(path: Path) -> list[str]:
    return path.read_text().split("\n")


def _steps(path: Path) -> list[int]:
    """The step of every line of ``path``: each line must be a record."""
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def _write(path: Path, records: list[dict[str, Any]]) -> None:
    reporter = MetricsReporter(path=path)
    for record in records:
        reporter.report(record)
    reporter.flush()


# ---------------------------------------------------------------- 1: a killed writer's half line
def test_half_a_record_left_by_a_killed_run_is_cut_off(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1, "loss": 1.0}\n{"step": 2, "lo')
    _write(path, [{"step": 2, "loss": 0.5}])
    assert _steps(path) == [1, 2]
    assert path.read_text().endswith("\n")


def test_a_half_line_alone_in_the_file_is_cut_off(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 7, "lo')
    _write(path, [{"step": 1, "loss": 0.5}])
    assert _lines(path) == ['{"step": 1, "loss": 0.5}', ""]


def test_a_whole_last_record_without_its_line_end_is_kept(tmp_path: Path) -> None:
    """A file another tool wrote without a final line end: its last record is no half line."""
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1, "loss": 1.0}')
    _write(path, [{"step": 2, "loss": 0.5}])
    assert _steps(path) == [1, 2]


# ---------------------------------------------------------------- 2: another writer's lines
def test_a_failed_write_never_cuts_another_writers_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While this writer's write fails part way (a full disk), another writer appends its
    line, as a second run sharing the file does: taking the lock when it is free, waiting
    for it otherwise. The cut-back must leave that line, and no half line."""
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1, "loss": 1.0}\n')
    other = b'{"step": 100, "loss": 9.0, "run": "other"}\n'
    real_write = os.write
    calls: list[int] = []
    waiting: list[bytes] = []

    def other_writer() -> None:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                waiting.append(other)  # it waits for the lock, and writes after
                return
            real_write(fd, other)
        finally:
            os.close(fd)

    def failing_write(fd: int, data: Any) -> int:
        calls.append(len(data))
        if len(calls) == 1:
            other_writer()
            return real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    reporter = MetricsReporter(path=path)
    reporter.report({"step": 2, "loss": 0.5})
    reporter.report({"step": 3, "loss": 0.4})
    monkeypatch.setattr(os, "write", failing_write)
    reporter.flush()  # fails part way: the records are kept for the next flush
    monkeypatch.undo()
    assert reporter.errors == 1 and len(calls) == 2
    for line in waiting:  # the lock is free again: the other writer appends
        with open(path, "ab") as f:
            f.write(line)
    assert _steps(path) == [1, 100]
    reporter.flush()
    assert _steps(path) == [1, 100, 2, 3]


# ---------------------------------------------------------------- 3: a resumed run's records
def test_resend_cuts_the_records_of_steps_after_the_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    _write(path, [{"step": s, "loss": 1.0} for s in range(1, 7)])
    reporter = MetricsReporter(path=path)
    reporter.resend(None, 3)
    assert _steps(path) == [1, 2, 3]
    reporter.report({"step": 4, "loss": 0.5})
    reporter.flush()
    assert _steps(path) == [1, 2, 3, 4]


def test_resend_leaves_a_file_whose_last_record_is_no_later_step(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    text = '{"step": 1}\n{"step": 9}\nnot a record\n{"step": 2}\n'
    path.write_text(text)
    MetricsReporter(path=path).resend(None, 5)
    assert path.read_text() == text
    path.write_text('{"step": 1}\n{"step": 9}\nnot a record\n{"step": 7}\n{"st')
    MetricsReporter(path=path).resend(None, 5)  # only the later steps at the end go
    assert path.read_text() == '{"step": 1}\n{"step": 9}\nnot a record\n'
    MetricsReporter(path=tmp_path / "none.jsonl").resend(None, 5)  # no file: none made
    assert not (tmp_path / "none.jsonl").exists()


def test_a_resumed_run_writes_each_steps_record_once(tmp_path: Path) -> None:
    """The first run checkpoints at step 4 and goes on to step 6 before it ends (as a run
    killed after step 6 would have its records shipped); the second resumes at step 4 and
    redoes steps 5 and 6: each step's record once in the file, the second run's."""
    out = tmp_path / "records.jsonl"
    x, y = tiny_regression(8).tensors

    def run() -> None:
        model = tiny_model()
        with dt.init(
            model,
            torch.optim.SGD(model.parameters(), lr=0.01),
            global_batch_size=8,
            checkpoint_dir=str(tmp_path / "ckpt"),
            checkpoint_every_steps=4,
            metrics_file=out,
            report_interval_s=60,
            progress=False,
        ) as ctx:
            while ctx.step_num < 6:
                ctx.step((x, y), mse_loss)

    run()
    first = [r for r in map(json.loads, out.read_text().splitlines()) if "loss" in r]
    assert [r["step"] for r in first] == [1, 2, 3, 4, 5, 6]
    run()
    records = [r for r in map(json.loads, out.read_text().splitlines()) if "loss" in r]
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5, 6]
    assert records[:4] == first[:4]  # the first run's, up to its checkpoint
    assert records[4:] != first[4:]  # the second run's (another time at least)


def test_a_filesystem_without_locks_is_written_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``flock`` refused as not supported (some FUSE and network mounts): the records are
    appended without the lock, and a cut-back that cannot be made never fails the resume."""
    path = tmp_path / "m.jsonl"

    def no_locks(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    _write(path, [{"step": 1, "loss": 1.0}, {"step": 2, "loss": 0.5}])
    assert _steps(path) == [1, 2]
    MetricsReporter(path=path).resend(None, 1)
    assert _steps(path) == [1]

    def broken(fd: int, operation: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(fcntl, "flock", broken)
    with caplog.at_level(logging.WARNING, logger="danlu.train"):
        assert MetricsReporter(path=path).resend(None, 0) == 0
    assert "could not be cut back to step 0" in caplog.text
    assert _steps(path) == [1]
