"""A spec whose ``workdir`` is not a directory of the local executor's host fails at its
first launch with the reason (README: a spec "the executor cannot launch fails with the
reason instead of holding its GPUs"), rather than being restarted with backoff until it is
out of restarts: on the executor's one host the directory does not appear by itself. A live
server with the local executor; its GPU goes to the next job."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import live_server, spec, submit, wait_state

from danlu.server.services import jobs


def test_a_missing_workdir_fails_the_job_at_its_first_launch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobs, "RESTART_BACKOFF_SECONDS", 0.05)  # restarts would be quick
    gone = tmp_path / "no such dir"
    with live_server(tmp_path, fake_gpus="1x80GiB") as live, live.client() as c:
        job = submit(c, spec("nowhere", "pass", workdir=str(gone), max_restarts=3))
        done = wait_state(c, job["id"], {"FAILED", "SUCCEEDED", "CANCELLED"})
        assert (done["state"], done["restarts"]) == ("FAILED", 0), done
        events = c.get(f"/jobs/{job['id']}/events").json()
        assert [e["new"] for e in events] == ["PENDING", "RUNNING", "FAILED"], events
        reason = events[-1]["reason"]
        assert reason.startswith("cannot be launched: workdir: "), reason
        assert str(gone) in reason and "is not a directory" in reason, reason
        assert not (live.home / "executor" / "runs" / job["id"]).exists()  # no run recorded
        after = submit(c, spec("after", "pass"))  # the GPU is free again
        assert wait_state(c, after["id"], {"SUCCEEDED", "FAILED"})["state"] == "SUCCEEDED"
