"""A log follow goes on from the log's start once the log is truncated under it (a
``copytruncate`` logrotate, a job that opens its log again with ``"w"``): it kept its byte
offset, past the log's new end, and showed nothing more of the job's output."""

from __future__ import annotations

from pathlib import Path

from helpers import live_server, spec, submit, wait_state

NOTE = b"[danlu: the log was truncated; following it from its start]\n"
FILLER = 40  # lines of 61 bytes before the truncation: far more than what is written after


def _truncating_job(go: Path) -> str:
    """A job that prints its filler and a line it does not end, waits for ``go`` to exist,
    truncates its own log (its stdout, opened for appending) and prints one line more."""
    return (
        "import os, sys, time\n"
        f"for i in range({FILLER}):\n"
        "    print(f'{i:03d}' + 'x' * 57, flush=True)\n"
        "print('unended', end='', flush=True)\n"
        "for _ in range(600):\n"
        f"    if os.path.exists({str(go)!r}):\n"
        "        break\n"
        "    time.sleep(0.1)\n"
        "os.ftruncate(sys.stdout.fileno(), 0)\n"
        "print('after the truncation', flush=True)\n"
        "time.sleep(0.5)\n"
    )


def test_a_follow_restarts_from_the_start_of_a_truncated_log(tmp_path: Path) -> None:
    go = tmp_path / "go"
    with live_server(tmp_path, follow_timeout=120) as live, live.client() as admin:
        job = submit(admin, spec("rotated", _truncating_job(go)))
        wait_state(admin, job["id"], "RUNNING")
        seen = b""
        with admin.stream("GET", f"/jobs/{job['id']}/logs", params={"follow": "true"}) as stream:
            for chunk in stream.iter_bytes():  # ends once the job has ended
                seen += chunk
                if b"unended" in seen and not go.exists():
                    go.touch()  # the follow has read past what the log holds after
        assert b"after the truncation" in seen, seen[-200:]
        # the note on a line of its own, after the line the job left unended
        assert seen.endswith(b"unended\n" + NOTE + b"after the truncation\n")
        assert seen.count(NOTE) == 1
        assert admin.get(f"/jobs/{job['id']}").json()["state"] == "SUCCEEDED"
        # a plain read gives what the log holds now
        assert admin.get(f"/jobs/{job['id']}/logs").content == b"after the truncation\n"
