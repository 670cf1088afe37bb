"""A cap on a local job's log (``DANLU_LOG_MAX_MB``): the job's stdout and stderr are the
log's descriptor, so a job printing in a loop filled the disk. Its supervisor checks the
log at each heartbeat: past the cap, the newest part moves to ``JOB.log.1`` and the log
starts anew with a line saying so, which a reader following it sees; the job writes on and
ends with its own exit code."""

from __future__ import annotations

import errno
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import pytest

from danlu.config import load_settings
from danlu.core.cluster import Cluster
from danlu.core.errors import ConfigError
from danlu.devices.inventory import fake_inventory
from danlu.executors import JobLaunch, LocalExecutor, Outcome, supervise
from danlu.executors.logcap import LogCap
from danlu.server.app import build_executor

CAP = 8 * 1024
FLOOD = (  # 2,000 numbered lines of 100 bytes, as fast as it can; a last one once the
    # heartbeats capped the log (nothing written while they copy it), then exit 3
    "import sys, time\n"
    "for i in range(2000):\n"
    "    sys.stdout.write(f'{i:06d} ' + 'x' * 92 + '\\n')\n"
    "    sys.stdout.flush()\n"
    "time.sleep(0.5)\n"
    "print('the end', flush=True)\n"
    "sys.exit(3)\n"
)
WRITE_THEN_WAIT = (  # 40 lines (4 KB: under the cap), then at argv[1] 160 more (16 KB: past
    # it), then at argv[2] one line more, exit 0; each phase once its go file is there
    "import pathlib, sys, time\n"
    "def wait(name):\n"
    "    while not pathlib.Path(name).exists():\n"
    "        time.sleep(0.02)\n"
    "for i in range(200):\n"
    "    if i == 40:\n"
    "        wait(sys.argv[1])\n"
    "    print(f'{i:06d} ' + 'y' * 92, flush=True)\n"
    "wait(sys.argv[2])\n"
    "print('the last line', flush=True)\n"
)


def _executor(tmp_path: Path, cap: int = CAP) -> LocalExecutor:
    return LocalExecutor(
        Cluster.homogeneous(1, 1),
        tmp_path / "state",
        base_env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        heartbeat=0.05,
        log_max_bytes=cap,
    )


def _wait(ex: LocalExecutor, job: JobLaunch) -> tuple[Outcome | None, int | None]:
    handle = ex.submit(job)
    deadline = time.monotonic() + 60
    while (status := ex.poll(handle)).running:
        assert time.monotonic() < deadline, "the run never ended"
        time.sleep(0.02)
    return status.outcome, status.exit_code


def test_a_flooding_job_keeps_its_log_under_the_cap_and_ends_with_its_code(
    tmp_path: Path,
) -> None:
    ex = _executor(tmp_path)
    outcome, code = _wait(ex, JobLaunch("flood", (sys.executable, "-c", FLOOD)))
    assert (outcome, code) == (Outcome.FAILED, 3)
    log = tmp_path / "state" / "logs" / "flood.log"
    kept = log.with_name("flood.log.1")
    data = log.read_bytes()
    assert len(data) <= CAP  # 200 KB written; the last beat, after the exit, capped it too
    assert data.startswith(b"[danlu: the log passed its cap of 8192 bytes (DANLU_LOG_MAX_MB);")
    assert b"its older part is in flood.log.1]\n" in data
    older = kept.read_bytes()
    assert 0 < len(older) <= CAP // 2
    assert older.endswith(b"\n") and older[:7].decode().strip().isdigit()  # whole lines
    assert oct(kept.stat().st_mode & 0o777) == "0o600"
    assert data.endswith(b"the end\n")  # the job's last line, after the note


def test_a_follower_sees_the_log_start_anew_with_the_note(tmp_path: Path) -> None:
    ex = _executor(tmp_path)
    more, end = tmp_path / "more", tmp_path / "end"
    command = (sys.executable, "-c", WRITE_THEN_WAIT, str(more), str(end))
    handle = ex.submit(JobLaunch("follow", command))
    log = tmp_path / "state" / "logs" / "follow.log"
    kept = log.with_name("follow.log.1")
    offset, seen, restarted = 0, b"", False
    deadline = time.monotonic() + 60
    while offset < 4000:  # a follower (logs() from where it was) has read the first lines
        assert time.monotonic() < deadline, "the first lines never came"
        data, offset = ex.logs(handle, offset)
        seen += data
        time.sleep(0.01)
    more.touch()  # 16 KB more: past the cap, and the log starts anew, under 4 KB long
    while b"[danlu: the log passed" not in seen:
        assert time.monotonic() < deadline, f"the note never came ({len(seen)} bytes read)"
        if ex.log_size(handle) < offset:  # shrunk: read it again from its start
            offset, restarted = 0, True
        data, offset = ex.logs(handle, offset)
        seen += data
        time.sleep(0.01)
    assert restarted
    older = kept.read_bytes().splitlines()  # whole lines of the job's, in order
    assert older and all(line.endswith(b" " + b"y" * 92) for line in older)
    numbers = [int(line[:6]) for line in older]
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))
    end.touch()
    while (status := ex.poll(handle)).running:
        assert time.monotonic() < deadline, "the run never ended"
        time.sleep(0.02)
    assert status.outcome is Outcome.SUCCEEDED and status.exit_code == 0
    assert log.read_bytes().endswith(b"the last line\n")  # appended after the note
    ex.discard("follow")
    assert not log.exists() and not kept.exists()  # discarded with the log


def test_no_cap_leaves_the_log_whole(tmp_path: Path) -> None:
    ex = _executor(tmp_path, cap=0)
    assert _wait(ex, JobLaunch("whole", (sys.executable, "-c", FLOOD))) == (Outcome.FAILED, 3)
    log = tmp_path / "state" / "logs" / "whole.log"
    assert log.stat().st_size == 200_000 + len("the end\n")
    assert not log.with_name("whole.log.1").exists()
    launch = supervise.read_json(tmp_path / "state" / "runs" / "whole" / supervise.LAUNCH)
    assert launch is not None and "log_max_bytes" not in launch


@pytest.mark.parametrize("bad", [-1, 1.5, True, "1024"])
def test_a_cap_that_is_no_size_is_refused(tmp_path: Path, bad: object) -> None:
    with pytest.raises(ConfigError, match="log_max_bytes"):
        _executor(tmp_path, cap=bad)  # type: ignore[arg-type]


def test_a_copy_that_fails_truncates_all_the_same(tmp_path: Path) -> None:
    log = tmp_path / "j.log"
    log.write_bytes(b"z" * 5000)

    @contextmanager
    def full(path: Path) -> Iterator[BinaryIO]:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        yield  # pragma: no cover

    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    try:
        cap = LogCap.of({"log_max_bytes": 4096, "log_path": str(log)}, full, fd)
        assert cap is not None and cap.check()
        os.write(fd, b"on\n")
    finally:
        os.close(fd)
    text = log.read_text()
    assert text.startswith("[danlu: the log passed its cap of 4096 bytes")
    assert "its older part was not kept (No space left on device)]\n" in text
    assert text.endswith("]\non\n") and not (tmp_path / "j.log.1").exists()


def test_no_cap_on_a_descriptor_that_is_not_the_log(tmp_path: Path) -> None:
    log = tmp_path / "j.log"
    log.write_bytes(b"")
    other = tmp_path / "other"
    other.write_bytes(b"q" * 5000)
    with open(other, "ab") as f:  # the supervisor run in-process: its stdout is not the log
        spec = {"log_max_bytes": 4096, "log_path": str(log)}
        assert LogCap.of(spec, supervise.atomic_file, f.fileno()) is None
    assert other.stat().st_size == 5000


def test_the_setting_reaches_the_local_executor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DANLU_LOG_MAX_MB", "3")
    settings = load_settings(home=tmp_path)
    ex = build_executor(settings, fake_inventory("1x80GiB"), None)
    assert isinstance(ex, LocalExecutor) and ex.log_max_bytes == 3 * 1024**2


@pytest.mark.parametrize(
    ("written", "size"),
    [("", 1024**3), ("0", 0), ("2048", 2 * 1024**3), ("2GiB", 2 * 1024**3), ("5MB", 5 * 10**6)],
)
def test_the_setting_reads_mib_or_a_size_with_a_unit(
    monkeypatch: pytest.MonkeyPatch, written: str, size: int
) -> None:
    monkeypatch.setenv("DANLU_LOG_MAX_MB", written)
    assert load_settings().log_max_bytes == size


@pytest.mark.parametrize(
    ("written", "says"),
    [
        ("0.5", "below the least cap, 1 MiB"),
        ("lots", "'lots' is not a byte size"),
        ("-1", "greater than or equal to 0"),
    ],
)
def test_the_setting_refuses_what_is_no_cap(
    monkeypatch: pytest.MonkeyPatch, written: str, says: str
) -> None:
    monkeypatch.setenv("DANLU_LOG_MAX_MB", written)
    with pytest.raises(ConfigError, match="DANLU_LOG_MAX_MB") as caught:
        load_settings()
    assert says in str(caught.value) and "0: no cap" in str(caught.value)


def test_a_link_the_job_put_at_the_older_part_is_replaced_not_written_through(
    tmp_path: Path,
) -> None:
    log = tmp_path / "j.log"
    log.write_bytes(b"line\n" * 1000)
    victim = tmp_path / "victim"
    victim.write_bytes(b"secret")
    (tmp_path / "j.log.1").symlink_to(victim)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    try:
        cap = LogCap.of({"log_max_bytes": 2048, "log_path": str(log)}, supervise.atomic_file, fd)
        assert cap is not None and cap.check()
    finally:
        os.close(fd)
    assert victim.read_bytes() == b"secret"
    kept = tmp_path / "j.log.1"
    assert not kept.is_symlink() and kept.read_bytes() == b"line\n" * 204  # 1 KiB, whole lines
