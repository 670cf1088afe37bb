"""``GET /jobs/{id}/events?tail=true``: a job's newest events (oldest first in the answer), as
``/events`` and ``/jobs/{id}/metrics`` give theirs; without ``tail`` the oldest."""

from __future__ import annotations

from pathlib import Path

from helpers import live_server, spec, wait_state


def test_tail_gives_a_job_s_newest_events_oldest_first(tmp_path: Path) -> None:
    with live_server(tmp_path, fake_gpus="1x80GiB") as live, live.client() as c:
        job = c.post("/jobs", json=spec("evented", "import time; time.sleep(60)")).json()
        wait_state(c, job["id"], "RUNNING")
        c.post(f"/jobs/{job['id']}/cancel").raise_for_status()
        wait_state(c, job["id"], "CANCELLED")
        every = c.get(f"/jobs/{job['id']}/events").json()
        assert len(every) >= 3 and every[-1]["new"] == "CANCELLED"
        ids = [e["id"] for e in every]
        oldest = c.get(f"/jobs/{job['id']}/events", params={"limit": 2}).json()
        assert [e["id"] for e in oldest] == ids[:2]
        newest = c.get(f"/jobs/{job['id']}/events", params={"limit": 2, "tail": True}).json()
        assert [e["id"] for e in newest] == ids[-2:]  # the newest two, oldest first
        after = {"limit": 2, "tail": True, "after_id": ids[-2]}  # both bounds hold
        assert [e["id"] for e in c.get(f"/jobs/{job['id']}/events", params=after).json()] == [
            ids[-1]
        ]
