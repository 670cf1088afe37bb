"""``priority`` on the control plane: an aged low-priority job and a higher one never take
turns preempting each other.

On 4 GPUs a 4-GPU blocker runs; L0 (priority 0) and then H3 (priority 3), both for 4 GPUs,
wait behind it, L0 aged ahead of H3 in the queue. The queue pass started L0 when the
blocker ended, the next round preempted it for H3, H3's start waited for L0 to drain, and
by then L0 was back in the queue, aged ahead again, and started again: 72 preemptions in
57 s, H3 never started. Now H3 starts first and L0 after it, neither preempted.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
from helpers import live_server, spec, submit, wait_state

AGING = '{"aging_per_hour": 360000}'
"""100 priority points a second waited: L0, submitted half a second before H3, ranks ahead
of it (by about 50 points against H3's 3)."""


def _events(client: httpx.Client, job_id: str) -> list[dict[str, Any]]:
    response = client.get(f"/jobs/{job_id}/events")
    assert response.status_code == 200, response.text
    events: list[dict[str, Any]] = response.json()
    return events


def test_an_aged_low_job_does_not_take_turns_with_a_higher_one(tmp_path: Path) -> None:
    release = tmp_path / "release"
    wait_for_release = (
        f"import os, time\nwhile not os.path.exists({str(release)!r}): time.sleep(0.05)"
    )
    four = {"resources": {"gpus": 4}}
    with (
        live_server(tmp_path, fake_gpus="4x80GiB", policy_options=AGING) as live,
        live.client() as c,
    ):
        blocker = submit(c, spec("blocker", wait_for_release, priority=10, **four))
        wait_state(c, blocker["id"], "RUNNING")
        low = submit(c, spec("L0", "import time; time.sleep(0.5)", priority=0, **four))
        time.sleep(0.5)  # L0 ages ahead of H3 (not an assertion: the gap only has to exist)
        high = submit(c, spec("H3", "import time; time.sleep(0.5)", priority=3, **four))
        release.touch()
        wait_state(c, high["id"], "SUCCEEDED", timeout=30)
        done = wait_state(c, low["id"], "SUCCEEDED", timeout=30)
        low_events = _events(c, low["id"])
        high_events = _events(c, high["id"])
    assert done["preemptions"] == 0, [e["new"] for e in low_events]
    assert [e["new"] for e in high_events] == ["PENDING", "RUNNING", "SUCCEEDED"]
    assert [e["new"] for e in low_events] == ["PENDING", "RUNNING", "SUCCEEDED"]
    high_end = next(e["time"] for e in high_events if e["new"] == "SUCCEEDED")
    low_start = next(e["time"] for e in low_events if e["new"] == "RUNNING")
    assert low_start >= high_end  # H3 ran first, on the whole cluster
