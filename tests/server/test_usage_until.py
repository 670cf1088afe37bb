"""``GET /usage`` with ``until`` and no ``since``: the period is the 7 days before ``until``,
or before now for an ``until`` still to come. A far ``until`` (past ~1e300) once took
``since`` for ``until`` itself (7 days are lost in its rounding) and was refused with a
422 naming ``since``, which the caller never sent; a nearer future one reported the 7 days
before it, in which nothing can have run yet."""

from __future__ import annotations

import time
from pathlib import Path

from helpers import live_server, spec, wait_state


def test_usage_until_a_time_to_come_reports_the_last_week(tmp_path: Path) -> None:
    with live_server(tmp_path, fake_gpus="1x80GiB") as live, live.client() as c:
        job = c.post("/jobs", json=spec("short", "import time; time.sleep(0.3)")).json()
        wait_state(c, job["id"], "SUCCEEDED")
        week = [(r["project"], r["user"], r["jobs"]) for r in c.get("/usage").json()]
        assert week == [("default", "admin", 1)]
        for until in (time.time() + 30 * 86_400.0, 1e308):
            got = c.get("/usage", params={"until": until})
            assert got.status_code == 200, got.text
            assert [(r["project"], r["user"], r["jobs"]) for r in got.json()] == week


def test_usage_until_too_far_back_names_until(tmp_path: Path) -> None:
    with live_server(tmp_path, fake_gpus="1x80GiB", start_loops=False) as live, live.client() as c:
        refused = c.get("/usage", params={"until": -1e308})
        assert refused.status_code == 422
        assert refused.json()["error"]["field"] == "until"
        assert c.get("/usage", params={"until": 5}).json() == []  # nothing ran then
        bad = c.get("/usage", params={"since": 10, "until": 5})
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "since"
