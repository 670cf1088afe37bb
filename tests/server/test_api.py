"""The REST contract of docs/api.md over real HTTP (uvicorn on 127.0.0.1, local executor,
fake GPUs, SQLite; the core flow also on PostgreSQL)."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

import httpx
import pytest
from helpers import (
    Live,
    live_server,
    replayed_state,
    spec,
    submit,
    truncate,
    wait_for,
    wait_state,
)

from danlu.train.report import MetricsReporter

GiB = 1024**3


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    with live_server(tmp_path, fake_gpus="2x80GiB") as server:
        yield server


def test_health_openapi_and_auth_required(live: Live) -> None:
    health = httpx.get(f"{live.url}/api/v1/health")
    assert health.status_code == 200
    assert health.json()["status"] == "ok"
    # the schema is built at its first request: seconds under a loaded suite (5 s default)
    schema = httpx.get(f"{live.url}/api/v1/openapi.json", timeout=60).json()
    paths = set(schema["paths"])
    for path in (
        "/api/v1/jobs",
        "/api/v1/jobs/{job_id}/logs",
        "/api/v1/cluster/nodes",
        "/api/v1/users/{name}/tokens",
        "/api/v1/projects/{name}",
    ):
        assert path in paths
    anonymous = httpx.get(f"{live.url}/api/v1/jobs")
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["type"] == "AuthError"
    with live.client("dl_abcdefgh_not-a-real-token-at-all-xx") as bad:
        assert bad.get("/jobs").status_code == 401
    with live.client() as admin:
        me = {
            "name": "admin",
            "role": "admin",
            "os_user": None,
            "quota_gpus": None,
            "disabled_at": None,
            "disabled_by": None,
            "disable_reason": None,
        }
        assert admin.get("/users/me").json() == me


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_submit_run_logs_events(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    db_url = None
    if backend == "postgresql":
        db_url = _pg_url(request)
    with live_server(tmp_path, fake_gpus="2x80GiB", db_url=db_url) as live, live.client() as c:
        job = submit(
            c,
            spec(
                "hello", "print('hello from danlu')", resources={"gpus": 1, "gpu_memory": "20GiB"}
            ),
        )
        assert job["state"] in ("PENDING", "RUNNING")
        assert job["gpu_memory"] == 20 * GiB
        done = wait_state(c, job["id"], "SUCCEEDED")
        assert done["exit_code"] == 0 and done["restarts"] == 0
        logs = c.get(f"/jobs/{job['id']}/logs")
        assert logs.status_code == 200 and "hello from danlu" in logs.text
        offset = int(logs.headers["X-Danlu-Log-Offset"])
        assert offset == len(logs.content)
        assert c.get(f"/jobs/{job['id']}/logs", params={"offset": offset}).content == b""
        events = c.get(f"/jobs/{job['id']}/events").json()
        assert [e["new"] for e in events] == ["PENDING", "RUNNING", "SUCCEEDED"]
        assert replayed_state(events) == "SUCCEEDED"
        assert all(e["reason"] for e in events)
        listed = c.get("/jobs").json()
        assert {"id", "name", "state", "restarts"} <= set(listed[0])
        assert c.get(f"/jobs/{job['id'][:6]}").json()["id"] == job["id"]


def test_the_tail_of_a_log_longer_than_one_read(tmp_path: Path) -> None:
    """``tail`` reads the last bytes of a log past the 1 MiB a read brings (the dashboard's
    log view; reading on from the first read's end brought the log's second MiB)."""
    script = "import sys; sys.stdout.write('x' * 1_500_000 + '\\nthe end\\n')"
    with live_server(tmp_path, fake_gpus="1x80GiB") as live, live.client() as c:
        job = submit(c, spec("long-log", script, resources={"gpus": 1, "gpu_memory": "1GiB"}))
        wait_state(c, job["id"], "SUCCEEDED")
        path = f"/jobs/{job['id']}/logs"
        tail = c.get(path, params={"tail": 100})
        assert tail.status_code == 200 and tail.text.endswith("x\nthe end\n")
        assert len(tail.content) == 100
        assert tail.headers["X-Danlu-Log-Offset"] == str(1_500_000 + 9)
        short = c.get(path, params={"tail": 10_000_000})
        assert short.status_code == 422 and "tail" in short.text
        both = c.get(path, params={"tail": 100, "offset": 5})
        assert both.status_code == 422 and "offset or tail" in both.text


def _pg_url(request: pytest.FixtureRequest) -> str:
    url = request.getfixturevalue("pg_template")
    if url is None:
        pytest.skip("PostgreSQL is not installed (apt-get install -y postgresql)")
    from danlu.server.db import Database

    db = Database(url)
    truncate(db)
    db.dispose()
    return str(url)


def test_invalid_specs_name_the_field(live: Live) -> None:
    cases = [
        ({"command": ["true"]}, "name"),
        ({"name": "x", "command": "echo hi"}, "command"),
        ({"name": "x", "command": ["true"], "resources": {"gpus": 3}}, "resources.gpus"),
        (
            {"name": "x", "command": ["true"], "resources": {"gpu_memory": "200GiB"}},
            "resources.gpu_memory",
        ),
        ({"name": "x", "command": ["true"], "colour": "red"}, "colour"),
        ({"name": "x", "command": ["true"], "priority": 2**40}, "priority"),
        ({"name": "x", "command": ["true"], "project": "nope"}, "project"),
        ({"name": "x", "command": ["true"], "resources": {"gpus": "many"}}, "resources.gpus"),
        ({"name": "bad name!", "command": ["true"]}, "name"),
        # accepted before: an env name no process takes (its job then held its GPUs, relaunched
        # in vain every pass), numbers past the bounds the README gives
        ({"name": "x", "command": ["true"], "env": {"A=B": "1"}}, "env"),
        ({"name": "x", "command": ["true"], "priority": 2_000_000}, "priority"),
        (
            {"name": "x", "command": ["sh"], "resources": {"gpus": "1..9999999"}},
            "resources.gpus.max",
        ),
    ]
    with live.client() as c:
        for body, field in cases:
            response = c.post("/jobs", json=body)
            assert response.status_code == 422, (body, response.text)
            error = response.json()["error"]
            assert error["field"] == field, (body, error)
            assert error["message"]
        not_json = c.post("/jobs", content=b"{nope", headers={"content-type": "application/json"})
        assert not_json.status_code == 422
        assert c.get("/jobs", params={"limit": 0}).json()["error"]["field"] == "limit"
        assert c.get("/jobs", params={"state": "DONE"}).json()["error"]["field"] == "state"
        assert c.get("/jobs/deadbeef0000").status_code == 404


def test_cancel_pending_and_running(live: Live) -> None:
    with live.client() as c:
        blocker = submit(
            c,
            spec(
                "blocker", "import time; time.sleep(60)", resources={"gpus": 2}, preemptible=False
            ),
        )
        wait_state(c, blocker["id"], "RUNNING")
        queued = submit(c, spec("queued", "print(1)", resources={"gpus": 2}))
        why = c.get(f"/jobs/{queued['id']}/why").json()
        assert why["state"] == "PENDING" and why["reason"]
        cancelled = c.post(f"/jobs/{queued['id']}/cancel").json()
        assert cancelled["state"] == "CANCELLED"
        again = c.post(f"/jobs/{queued['id']}/cancel")
        assert again.status_code == 409 and again.json()["error"]["type"] == "ConflictError"
        c.post(f"/jobs/{blocker['id']}/cancel")
        done = wait_state(c, blocker["id"], "CANCELLED", timeout=20)
        assert done["allocation"] == []
        events = c.get(f"/jobs/{blocker['id']}/events").json()
        assert replayed_state(events) == "CANCELLED"


def test_projects_users_tokens_and_quotas(live: Live) -> None:
    with live.client() as admin:
        created = admin.post("/projects", json={"name": "vision", "priority": 5, "quota_gpus": 1})
        assert created.status_code == 201, created.text
        assert admin.post("/projects", json={"name": "vision"}).status_code == 409
        updated = admin.put("/projects/vision", json={"quota_gpu_memory": 40 * GiB}).json()
        assert updated["quota_gpus"] == 1 and updated["quota_gpu_memory"] == 40 * GiB
        assert updated["share"] == 1.0
        weighted = admin.put("/projects/vision", json={"share": 2.5}).json()
        assert (weighted["share"], weighted["quota_gpus"]) == (2.5, 1)
        for bad in (0, -1, 2e6):
            refused = admin.put("/projects/vision", json={"share": bad})
            assert refused.status_code == 422 and "share" in refused.text
        heavy = admin.post("/projects", json={"name": "heavy", "share": 3})
        assert heavy.status_code == 201 and heavy.json()["share"] == 3.0
        assert admin.put("/projects/nope", json={"priority": 1}).status_code == 404
        assert admin.post("/users", json={"name": "carol"}).status_code == 201
        token = admin.post("/users/carol/tokens", json={"name": "laptop"}).json()["token"]
        too_big = admin.post(
            "/jobs", json=spec("big", "print(1)", project="vision", resources={"gpus": 2})
        )
        assert too_big.status_code == 422
        assert too_big.json()["error"]["field"] == "resources.gpus"
    with live.client(token) as carol:
        me = {
            "name": "carol",
            "role": "user",
            "os_user": None,
            "quota_gpus": None,
            "disabled_at": None,
            "disabled_by": None,
            "disable_reason": None,
        }
        assert carol.get("/users/me").json() == me
        assert carol.post("/projects", json={"name": "mine"}).status_code == 403
        assert carol.post("/users", json={"name": "eve"}).status_code == 403
        assert carol.post("/users/admin/tokens", json={}).status_code == 403
        assert carol.post("/users/carol/tokens", json={}).status_code == 201
        listed = carol.get("/projects").json()
        assert "vision" in [p["name"] for p in listed]
        # the default policy (priority) keeps no history: no recent usage to report
        assert {(p["gpus_held"], p["recent_gpus"]) for p in listed} == {(0.0, None)}
        job = submit(
            carol,
            spec("mine", "print('carol')", project="vision", resources={"gpu_memory": "20GiB"}),
        )
        assert job["user"] == "carol" and job["project"] == "vision"
        as_admin = carol.post("/jobs", json=spec("x", "print(1)", user="admin"))
        assert as_admin.status_code == 403


def test_cluster_allocations_and_metrics(live: Live) -> None:
    with live.client() as c:
        job = submit(
            c,
            spec(
                "share", "import time; time.sleep(30)", resources={"gpus": 1, "gpu_memory": "30GiB"}
            ),
        )
        wait_state(c, job["id"], "RUNNING")
        nodes = c.get("/cluster/nodes").json()
        assert len(nodes) == 1 and nodes[0]["fake"] is True and len(nodes[0]["gpus"]) == 2
        held = [g for g in nodes[0]["gpus"] if job["id"] in g["jobs"]]
        assert len(held) == 1 and held[0]["allocated_memory"] == 30 * GiB
        allocations = c.get("/cluster/allocations").json()
        assert [a["job_id"] for a in allocations] == [job["id"]]
        posted = c.post(
            f"/jobs/{job['id']}/metrics",
            json={
                "metrics": [
                    {"step": 1, "loss": 2.5},
                    {"step": 2, "loss": 2.0, "checkpoint_step": 2},
                ]
            },
        )
        assert posted.json() == {"accepted": 2, "batch_size": None}
        got = c.get(f"/jobs/{job['id']}/metrics", params={"after_step": 1}).json()
        assert [(m["step"], m["loss"]) for m in got] == [(2, 2.0)]
        assert c.get(f"/jobs/{job['id']}").json()["checkpoint_step"] == 2
        bad = c.post(f"/jobs/{job['id']}/metrics", json={"metrics": [{"loss": 1}]})
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "metrics.0.step"
        c.post(f"/jobs/{job['id']}/cancel")
        wait_state(c, job["id"], "CANCELLED", timeout=20)


def test_the_job_side_reporter_delivers_a_backlog_and_a_diverged_loss(live: Live) -> None:
    """danlu.train's reporter against the real route: 2,500 records queued while the server
    was away, one with a NaN loss. Before, the NaN made every POST of the batch a 422, and
    more than 1,000 records were one POST the route refuses: the reporter sent the same
    batch again for good and the job's metrics never arrived again."""
    with live.client() as c:
        job = submit(c, spec("reports", "import time; time.sleep(30)"))
        wait_state(c, job["id"], "RUNNING")
        url = f"{live.url}/api/v1/jobs/{job['id']}/metrics"
        reporter = MetricsReporter(url=url, token=live.token, interval_s=60)
        for step in range(1, 2501):
            loss = math.nan if step == 1200 else 1.0 / step
            reporter.report({"step": step, "loss": loss, "checkpoint_step": step})
        reporter.flush()
        assert (reporter.sent, reporter.errors, reporter.dropped) == (2500, 0, 0)
        got = c.get(f"/jobs/{job['id']}/metrics", params={"after_step": 1195, "limit": 10}).json()
        assert [(m["step"], m["loss"]) for m in got][4:6] == [(1200, None), (1201, 1.0 / 1201)]
        assert c.get(f"/jobs/{job['id']}").json()["checkpoint_step"] == 2500
        # what the route would refuse is left out alone (counted, never sent again and
        # again); the valid record beside it is sent
        reporter.report({"step": -1})
        reporter.report({"step": 2501, "loss": 0.5})
        reporter.flush()
        assert (reporter.sent, reporter.dropped, reporter._retry) == (2501, 1, [])
        c.post(f"/jobs/{job['id']}/cancel")
        wait_state(c, job["id"], "CANCELLED", timeout=20)


def test_follow_streams_until_terminal(live: Live) -> None:
    code = "import time\nfor i in range(5):\n    print('line', i, flush=True)\n    time.sleep(0.2)"
    with live.client() as c:
        job = submit(c, spec("follow", code))
        with c.stream("GET", f"/jobs/{job['id']}/logs", params={"follow": "true"}) as response:
            text = b"".join(response.iter_bytes()).decode()
        assert all(f"line {i}" in text for i in range(5))
        assert c.get(f"/jobs/{job['id']}").json()["state"] == "SUCCEEDED"


FOLLOWERS = 40
"""As many follows as Starlette has worker threads (anyio's default limiter)."""


def test_follows_of_a_quiet_job_hold_no_worker_thread(tmp_path: Path) -> None:
    """Each follow of a quiet job held one of Starlette's 40 worker threads while it slept:
    40 followers froze every other route, ``/health`` too, until they ended. A follow waits
    on the event loop now: other requests are answered while every follow is still open,
    and the follows still end when the job does."""
    with live_server(tmp_path, start_loops=False, follow_timeout=120) as live, live.client() as c:
        job = submit(c, spec("quiet", "import time; time.sleep(60)"))  # no loop: PENDING
        url = f"{live.url}/api/v1/jobs/{job['id']}/logs"
        auth = {"Authorization": f"Bearer {live.token}"}
        opened: list[int] = []
        ended: dict[int, bytes] = {}

        def follow(i: int) -> None:
            with (
                httpx.Client(timeout=180, headers=auth) as h,
                h.stream("GET", url, params={"follow": "true"}) as response,
            ):
                opened.append(response.status_code)
                ended[i] = b"".join(response.iter_bytes())

        threads = [threading.Thread(target=follow, args=(i,)) for i in range(FOLLOWERS)]
        for thread in threads:
            thread.start()
        try:
            wait_for(lambda: len(opened) == FOLLOWERS, 60)
            try:  # a hang guard only: the assertion is that it answers while all are open
                health = httpx.get(f"{live.url}/api/v1/health", timeout=60)
            except httpx.TimeoutException:
                pytest.fail(f"/health was not answered while {FOLLOWERS} follows were open")
            assert health.status_code == 200
            assert c.get("/jobs").status_code == 200
            assert ended == {}  # every follow was still open meanwhile
        finally:
            with suppress(httpx.HTTPError):
                c.post(f"/jobs/{job['id']}/cancel")  # terminal: the follows end
            for thread in threads:
                thread.join(180)
        assert opened == [200] * FOLLOWERS
        assert ended == {i: b"" for i in range(FOLLOWERS)}


def test_a_token_s_last_use_is_stored(live: Live) -> None:
    """``last_used_at`` stayed null however often a token was used: it is stored after the
    response (once a minute at most, not a write per request)."""
    with live.client() as admin:
        assert admin.post("/users", json={"name": "alice"}).status_code == 201
        token = admin.post("/users/alice/tokens", json={}).json()["token"]

        def last_used() -> float | None:
            rows = admin.get("/users/alice/tokens").json()
            used: float | None = rows[0]["last_used_at"]
            return used

        assert last_used() is None
        with live.client(token) as alice:
            assert alice.get("/users/me").status_code == 200
            first = wait_for(last_used)
            for _ in range(3):
                assert alice.get("/jobs").status_code == 200
        assert last_used() == first  # used again within the minute: stored once


def test_an_elastic_job_with_a_model_gets_a_micro_batch_limit_at_submission(live: Live) -> None:
    hints = {"global_batch_size": 64, "max_batch_size": 4096}
    model = {**hints, "model": "danlu.estimate.zoo:resnet_tiny"}
    with live.client(timeout=300) as c:  # the submission traces the model
        job = submit(c, spec("m", "print(1)", resources={"gpus": "1..2"}, training=model))
        # traced for the fake 80 GiB GPUs: far more than 4096 samples fit; the fit is trusted
        # up to 32 x its largest traced batch (32)
        assert job["micro_batch_limit"] == 1024
        # the next submission's trace runs in a worker started ahead of need, same result
        assert live.prepared is not None
        tracers = live.prepared.app.state.danlu.tracers
        assert tracers.warm_takes == 0 and len(tracers.waiting()) == 1
        again = submit(c, spec("m2", "print(1)", resources={"gpus": "1..2"}, training=model))
        assert again["micro_batch_limit"] == 1024 and tracers.warm_takes == 1
        plain = submit(c, spec("p", "print(1)", resources={"gpus": "1..2"}, training=hints))
        assert plain["micro_batch_limit"] is None
        assert c.get(f"/jobs/{job['id']}").json()["micro_batch_limit"] == 1024
        wait_state(c, job["id"], "SUCCEEDED")
        wait_state(c, again["id"], "SUCCEEDED")
        wait_state(c, plain["id"], "SUCCEEDED")


def test_an_auto_family_is_inferred_at_submission_and_stored(live: Live) -> None:
    model = "danlu.estimate.zoo:resnet_tiny"
    with live.client(timeout=300) as c:  # the submission traces the model
        job = submit(
            c,
            spec(
                "fam",
                "print(1)",
                resources={"gpus": 1},
                training={"model": model, "family": "auto"},
            ),
        )
        assert job["spec"]["training"]["family"] == "cnn-small"
        assert "model family cnn-small inferred" in (job["pending_reason"] or "")
        assert c.get(f"/jobs/{job['id']}").json()["spec"]["training"]["family"] == "cnn-small"
        bad = c.post("/jobs", json=spec("nofam", "print(1)", training={"family": "auto"}))
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "training.family"
        wait_state(c, job["id"], "SUCCEEDED")


def test_gpu_memory_auto_without_model_uses_whole_gpus(live: Live) -> None:
    with live.client() as c:
        job = submit(c, spec("auto", "print(1)", resources={"gpus": 1, "gpu_memory": "auto"}))
        assert job["gpu_memory"] is None
        assert "whole GPUs" in (job["pending_reason"] or "")
        wait_state(c, job["id"], "SUCCEEDED")
        wait_for(lambda: c.get("/jobs", params={"state": "SUCCEEDED"}).json())
