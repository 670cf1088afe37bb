"""``why`` of a waiting job gives the policy's reason as it is: it used to add "(older jobs
are queued ahead)" whenever a job submitted earlier was pending, also when the policy ranks
this one first (a higher priority, a shorter job) and it starts before them."""

from __future__ import annotations

from pathlib import Path

from helpers import live_server, spec, submit, wait_for, wait_state

_SLEEP = "import time; time.sleep(60)"
_PLACEHOLDER = "waiting for the next scheduling round"
"""A new job's reason until a scheduling round has looked at it."""


def test_why_gives_the_policys_reason_for_a_job_it_ranks_first(tmp_path: Path) -> None:
    with live_server(tmp_path, fake_gpus="2x80GiB") as live, live.client() as c:
        blocker = spec("blocker", _SLEEP, resources={"gpus": 2}, priority=10, preemptible=False)
        blocker_id = submit(c, blocker)["id"]
        wait_state(c, blocker_id, "RUNNING")
        older = submit(c, spec("older", "print(1)", resources={"gpus": 2}))
        first = submit(c, spec("first", "print(1)", resources={"gpus": 2}, priority=5))

        def ranked() -> str | None:
            """The reason a scheduling round gave (not yet the submission's placeholder)."""
            reason = c.get(f"/jobs/{first['id']}").json()["pending_reason"]
            return None if not reason or reason.startswith(_PLACEHOLDER) else str(reason)

        pending_reason = wait_for(ranked)
        why = c.get(f"/jobs/{first['id']}/why").json()["reason"]
        assert why == pending_reason, why
        assert "older jobs" not in why
        for job_id in (older["id"], first["id"], blocker_id):
            assert c.post(f"/jobs/{job_id}/cancel").status_code == 200
