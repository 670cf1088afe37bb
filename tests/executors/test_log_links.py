"""A run's log is read only as the regular file it is: the job can write its run's directory
and replace its log with a symbolic link (to the server's secrets, another job's log), a hard
link to such a file (run as the control plane's user) or a FIFO, and what
:func:`~danlu.executors.records.read_log` reads is served to API users. A log that is a link,
a FIFO or a directory reads as no log, with a warning."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from danlu.executors import (
    Handle,
    JobLaunch,
    LaunchError,
    LocalExecutor,
    Outcome,
    ray_output,
    records,
    supervise,
)
from danlu.executors.errors import UnknownHandleError
from danlu.executors.local import last_alive

SECRET = b"the server's token: s3cr3t\n"
LOG = b"line one\nline two\n"


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "secret.txt"
    path.write_bytes(SECRET)
    return path


def _read_all(path: Path) -> tuple[tuple[bytes, int], int, str]:
    return records.read_log(path, 0, 1 << 20), records.log_size(path), records.log_tail(path)


def test_a_regular_log_reads_as_before(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = tmp_path / "j.log"
    log.write_bytes(LOG)
    with caplog.at_level(logging.WARNING, logger=records.__name__):
        assert records.read_log(log, 0, 1 << 20) == (LOG, len(LOG))
        assert records.read_log(log, 5, 3) == (LOG[5:8], 8)
        assert records.read_log(log, len(LOG), 10) == (b"", len(LOG))
        assert records.log_size(log) == len(LOG)
        assert records.log_tail(log) == LOG.decode()
        assert records.log_tail(log, 9) == LOG[9:].decode()
    assert not caplog.records
    missing = tmp_path / "none.log"
    assert _read_all(missing) == ((b"", 0), 0, "")


def test_a_log_linked_to_a_secret_reads_as_nothing(
    tmp_path: Path, secret: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = tmp_path / "j.log"
    log.symlink_to(secret)
    with caplog.at_level(logging.WARNING, logger=records.__name__):
        (data, offset), size, tail = _read_all(log)
        assert records.read_log(log, 7, 100) == (b"", 7)
    assert (data, offset, size, tail) == (b"", 0, 0, "")
    assert SECRET not in data and "s3cr3t" not in tail
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 4
    assert all(str(log) in w and "is a symbolic link; not followed" in w for w in warnings)


def _finishes(call: Callable[[], Any]) -> Any:
    """``call()``'s result, failing the test when it does not return within 5 s."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(call()), daemon=True)
    thread.start()
    thread.join(timeout=5)
    assert not thread.is_alive(), "the read hangs"
    return out[0]


def test_a_fifo_at_the_log_does_not_hang_and_reads_as_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = tmp_path / "j.log"
    os.mkfifo(log)
    writer = os.open(log, os.O_RDWR)  # a writer that never writes: a plain read would block
    try:
        with caplog.at_level(logging.WARNING, logger=records.__name__):
            assert _finishes(lambda: records.read_log(log, 0, 100)) == (b"", 0)
            assert _finishes(lambda: records.log_tail(log)) == ""
            assert _finishes(lambda: records.log_size(log)) == 0
    finally:
        os.close(writer)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3
    assert all(str(log) in w and "is not a regular file" in w for w in warnings)


def test_a_fifo_without_a_writer_does_not_hang(tmp_path: Path) -> None:
    log = tmp_path / "j.log"
    os.mkfifo(log)
    assert _finishes(lambda: records.read_log(log, 0, 100)) == (b"", 0)
    assert _finishes(lambda: records.log_tail(log)) == ""


def test_a_directory_at_the_log_reads_as_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = tmp_path / "j.log"
    log.mkdir()
    with caplog.at_level(logging.WARNING, logger=records.__name__):
        assert _read_all(log) == ((b"", 0), 0, "")
    assert any("is not a regular file" in r.getMessage() for r in caplog.records)


def _ran(ex: LocalExecutor, job_id: str, code: str, workdir: Path) -> Handle:
    workdir.mkdir(exist_ok=True)
    handle = ex.submit(JobLaunch(job_id, (sys.executable, "-c", code), workdir=str(workdir)))
    deadline = time.monotonic() + 15
    while (status := ex.poll(handle)).running:
        assert time.monotonic() < deadline, f"{job_id} never ended"
        time.sleep(0.02)
    assert status.outcome is Outcome.SUCCEEDED
    return handle


def test_a_job_that_links_its_log_to_another_jobs_log_reads_nothing(
    ex: LocalExecutor, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The link stays in the log directory (the check against links out of it passes), so
    only not following it keeps the other job's output from the job's reader."""
    other = _ran(ex, "other", f"print({SECRET.decode().strip()!r})", tmp_path / "wd")
    assert ex.logs(other)[0] == SECRET
    mine = _ran(ex, "mine", "print('mine')", tmp_path / "wd")
    log = tmp_path / "state" / "logs" / "mine.log"
    log.unlink()
    log.symlink_to(tmp_path / "state" / "logs" / "other.log")
    with caplog.at_level(logging.WARNING, logger=records.__name__):
        data, offset = ex.logs(mine)
        size = ex.log_size(mine)
    assert (data, offset, size) == (b"", 0, 0)
    assert any("is a symbolic link; not followed" in r.getMessage() for r in caplog.records)
    assert ex.logs(other)[0] == SECRET  # the other job's own log reads as before


def test_a_record_linked_or_a_fifo_reads_as_missing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The run's records (``exit.json`` and the rest, a Slurm node's exit file) are in the
    same directory the job writes: a link to another JSON file is not followed, and a FIFO
    there does not hang the control plane's poll."""
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text('{"exit_code": 0, "error": "another run\'s"}')
    regular = tmp_path / "regular.json"
    regular.write_text('{"exit_code": 3}')
    linked = tmp_path / supervise.EXIT
    linked.symlink_to(elsewhere)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with caplog.at_level(logging.WARNING, logger=supervise.__name__):
        assert supervise.read_json(regular) == {"exit_code": 3}
        assert supervise.read_json(linked) is None
        assert records.read_exit(tmp_path) is None
        assert _finishes(lambda: supervise.read_json(fifo)) is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert sum("is a symbolic link; not followed" in w for w in warnings) == 2
    assert any(str(fifo) in w and "is not a regular file" in w for w in warnings)


def test_a_launch_does_not_append_through_a_link_at_the_log(
    ex: LocalExecutor, tmp_path: Path
) -> None:
    """The job's next launch opens its log for the new run's output: through a link the job
    left there it would write into another job's log."""
    _ran(ex, "other", f"print({SECRET.decode().strip()!r})", tmp_path / "wd")
    _ran(ex, "mine", "print('mine')", tmp_path / "wd")
    logs = tmp_path / "state" / "logs"
    (logs / "mine.log").unlink()
    (logs / "mine.log").symlink_to(logs / "other.log")
    with pytest.raises(LaunchError, match="is a symbolic link"):
        ex.submit(JobLaunch("mine", (sys.executable, "-c", "print('into yours')"), attempt=2))
    assert (logs / "other.log").read_bytes() == SECRET
    assert (logs / "mine.log").is_symlink()


def test_a_launch_with_a_directory_at_the_log_is_a_launch_error(
    ex: LocalExecutor, tmp_path: Path
) -> None:
    """A directory at the log was an IsADirectoryError, an OSError the local executor takes
    for the node's (requeued without a restart counted: for ever)."""
    logs = tmp_path / "state" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "mine.log").mkdir()
    with pytest.raises(LaunchError, match="is not a regular file"):
        ex.submit(JobLaunch("mine", (sys.executable, "-c", "print('x')"), attempt=1))


def test_a_heartbeat_linked_to_a_busy_file_does_not_keep_a_run_alive(tmp_path: Path) -> None:
    """A run's last sign of life is its heartbeat's and log's own time: a link there to a
    file written all the time kept a lost run alive for good."""
    run_dir, busy = tmp_path / "run", tmp_path / "busy"
    run_dir.mkdir()
    busy.write_bytes(b"x")
    os.utime(busy, (5_000.0, 5_000.0))
    log = tmp_path / "j.log"
    log.symlink_to(busy)
    (run_dir / supervise.HEARTBEAT).symlink_to(busy)
    for link in (log, run_dir / supervise.HEARTBEAT):
        os.utime(link, (1_500.0, 1_500.0), follow_symlinks=False)
    assert last_alive(run_dir, log, 1_000.0, 10_000.0, False) == 1_500.0


@pytest.mark.parametrize("hard", [False, True], ids=["symbolic", "hard"])
def test_ray_output_is_not_appended_through_a_link(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, hard: bool
) -> None:
    """The Ray executor appends its actors' output to the job's log at each poll."""
    other = tmp_path / "other.log"
    other.write_bytes(SECRET)
    log = tmp_path / "mine.log"
    if hard:
        os.link(other, log)
    else:
        log.symlink_to(other)
    answer = {"output": b"mine\n", "exit_code": None, "more": False}
    with caplog.at_level(logging.WARNING, logger=ray_output.__name__):
        appended = ray_output.append_output(str(log), [answer], None)
    assert appended.taken == frozenset({0})  # dropped, not handed out again
    assert other.read_bytes() == SECRET
    why = HARD_LINK if hard else "is a symbolic link"
    assert any(str(log) in r.getMessage() and why in r.getMessage() for r in caplog.records)
    regular = tmp_path / "regular.log"
    ray_output.append_output(str(regular), [answer], None)
    assert regular.read_bytes() == b"mine\n"
    assert regular.stat().st_mode & 0o777 == 0o600


def test_a_socket_at_the_log_reads_as_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = tmp_path / "j.log"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(log))
        with caplog.at_level(logging.WARNING, logger=records.__name__):
            assert _read_all(log) == ((b"", 0), 0, "")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3
    assert all("is not a regular file" in w for w in warnings)


def test_a_run_directory_replaced_by_a_link_is_not_the_other_jobs_run(
    ex: LocalExecutor, tmp_path: Path
) -> None:
    """``runs/mine`` made a link to ``runs/other``: resolved, its name was ``other`` and the
    other run's record matched it, so mine's polls read the other run, its discard deleted
    the other run's records, and mine's next launch emptied them. The link is now the run
    directory of ``mine``, whose record (the other's) names another job: no run of mine, the
    link removed, the other run's records kept."""
    other = _ran(ex, "other", "print('other')", tmp_path / "wd")
    mine = _ran(ex, "mine", "print('mine')", tmp_path / "wd")
    runs = tmp_path / "state" / "runs"
    shutil.rmtree(runs / "mine")
    (runs / "mine").symlink_to(runs / "other")
    records_before = sorted(p.name for p in (runs / "other").iterdir())
    with pytest.raises(UnknownHandleError):
        ex.poll(mine)
    assert ex.logs(mine)[0] == b"mine\n"  # its log is still its own
    ex.discard("mine")
    assert not (runs / "mine").exists() and not (runs / "mine").is_symlink()
    assert sorted(p.name for p in (runs / "other").iterdir()) == records_before
    assert ex.poll(other).outcome is Outcome.SUCCEEDED
    (runs / "mine").symlink_to(runs / "other")
    _ran(ex, "mine", "print('again')", tmp_path / "wd")  # the launch removes the link
    assert (runs / "mine").is_dir() and not (runs / "mine").is_symlink()
    assert sorted(p.name for p in (runs / "other").iterdir()) == records_before
    assert ex.poll(other).outcome is Outcome.SUCCEEDED


# -- hard links: the job runs as the control plane's user, and links another of its files ------

HARD_LINK = "has other hard links"


def test_a_log_hard_linked_to_a_secret_reads_as_nothing(
    tmp_path: Path, secret: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The job deleted its log and made a hard link to the server's secrets at its path: the
    same file, not a link to follow, so only its other name gives it away."""
    log = tmp_path / "j.log"
    os.link(secret, log)
    with caplog.at_level(logging.WARNING, logger=records.__name__):
        (data, offset), size, tail = _read_all(log)
        assert records.read_log(log, 7, 100) == (b"", 7)
    assert (data, offset, size, tail) == (b"", 0, 0, "")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 4
    assert all(str(log) in w and HARD_LINK in w for w in warnings)
    os.unlink(secret)  # the log's only name again: the job's own file, read
    assert _read_all(log) == ((SECRET, len(SECRET)), len(SECRET), SECRET.decode())


def test_a_job_that_hard_links_its_log_to_another_jobs_log_reads_nothing(
    ex: LocalExecutor, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    other = _ran(ex, "other", f"print({SECRET.decode().strip()!r})", tmp_path / "wd")
    mine = _ran(ex, "mine", "print('mine')", tmp_path / "wd")
    logs = tmp_path / "state" / "logs"
    (logs / "mine.log").unlink()
    os.link(logs / "other.log", logs / "mine.log")
    with caplog.at_level(logging.WARNING, logger=records.__name__):
        assert (ex.logs(mine), ex.log_size(mine)) == ((b"", 0), 0)
        assert ex.logs(other) == (b"", 0)  # a file of two names, whichever is read
    assert any(HARD_LINK in r.getMessage() for r in caplog.records)
    (logs / "mine.log").unlink()
    assert ex.logs(other)[0] == SECRET  # its only name again


@pytest.mark.parametrize("target", ["other.log", "secret"], ids=["other-job", "secret"])
def test_a_launch_does_not_append_through_a_hard_link_at_the_log(
    ex: LocalExecutor, tmp_path: Path, secret: Path, target: str
) -> None:
    """The job's next launch appended the new run's output to the file the job linked at its
    log (the server's database, another job's log): it is refused as for a symbolic link,
    and the file is left as it was."""
    _ran(ex, "other", f"print({SECRET.decode().strip()!r})", tmp_path / "wd")
    _ran(ex, "mine", "print('mine')", tmp_path / "wd")
    logs = tmp_path / "state" / "logs"
    linked = secret if target == "secret" else logs / target
    (logs / "mine.log").unlink()
    os.link(linked, logs / "mine.log")
    with pytest.raises(LaunchError, match=HARD_LINK):
        ex.submit(JobLaunch("mine", (sys.executable, "-c", "print('into yours')"), attempt=2))
    assert [h.job_id for h in ex.adopt()] == ["other"]  # no run of mine started
    time.sleep(0.3)  # (a supervisor started anyway would have written by now)
    assert linked.read_bytes() == SECRET
    assert os.lstat(logs / "mine.log").st_nlink == 2


def test_a_launch_opens_the_log_once(
    ex: LocalExecutor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The launch's length of the log and the supervisor's output are of one open: a second
    open could find another file the job put there in between."""
    opened: list[str] = []
    real = supervise.open_regular

    def counting(path: str | Path, flags: int = os.O_RDONLY, mode: int = 0o600) -> int | str:
        if flags & os.O_WRONLY:
            opened.append(str(path))
        return real(path, flags, mode)

    monkeypatch.setattr(supervise, "open_regular", counting)
    _ran(ex, "mine", "print('mine')", tmp_path / "wd")
    assert opened == [str(tmp_path / "state" / "logs" / "mine.log")]
    assert ex.logs(Handle("mine", 1))[0] == b"mine\n"


def test_a_record_hard_linked_reads_as_missing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A hard link at ``exit.json`` to another run's exit record would end the run as that
    one did."""
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text('{"exit_code": 0, "outcome": "succeeded"}')
    os.link(elsewhere, tmp_path / supervise.EXIT)
    with caplog.at_level(logging.WARNING, logger=supervise.__name__):
        assert supervise.read_json(tmp_path / supervise.EXIT) is None
        assert records.read_exit(tmp_path) is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and all(HARD_LINK in w for w in warnings)
    assert supervise.read_json(elsewhere) is None  # a file of two names, whichever is read


def test_a_heartbeat_hard_linked_to_a_busy_file_does_not_keep_a_run_alive(
    tmp_path: Path,
) -> None:
    """A hard link shares the busy file's time: it is no sign of life at all."""
    run_dir, busy = tmp_path / "run", tmp_path / "busy"
    run_dir.mkdir()
    busy.write_bytes(b"x")
    os.utime(busy, (5_000.0, 5_000.0))
    log = tmp_path / "j.log"
    os.link(busy, log)
    os.link(busy, run_dir / supervise.HEARTBEAT)
    assert last_alive(run_dir, log, 1_000.0, 10_000.0, False, [1_200.0]) == 1_200.0
