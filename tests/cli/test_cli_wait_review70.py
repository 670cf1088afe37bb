"""``danlu wait`` on job arrays judged from the array (one request a poll, not one per task),
its timeout naming each thing by what it is, a request the server did not answer in time
told apart from a server that cannot be reached, and ``danlu metrics`` on a job whose
records the retention deleted; through the in-memory API of ``cli_fake_api``."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_fake_api import TOKEN, FakeApi, invoke, jobs_app, serve_jobs_commands

from danlu.cli import metrics as metrics_cli
from danlu.client import Client, ServerUnavailable

APP = jobs_app()
metrics_cli.register(APP)
ARRAY = "e1035b0c9d8a"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    api = serve_jobs_commands(monkeypatch)
    plain = api.handler

    def handler(request: httpx.Request) -> httpx.Response:
        """``GET /sweeps/{prefix}`` answered by a unique prefix, as the server does."""
        found = re.fullmatch(r"/api/v1/sweeps/([^/]+)", request.url.path)
        if found and request.method == "GET":
            hits = [key for key in api.sweeps if key.startswith(found.group(1))]
            if len(hits) == 1:
                api.requests.append(request)
                return httpx.Response(200, json=api.sweeps[hits[0]])
        return plain(request)

    api.handler = handler  # type: ignore[method-assign]
    return api


def run(*args: str) -> tuple[int, str, str]:
    return invoke(APP, *args)


def add_array(fake: FakeApi, tasks: int, state: str, task_state: str) -> list[dict[str, Any]]:
    """An array ``ARRAY`` named ``shard`` in ``state`` whose tasks are all in ``task_state``."""
    jobs = [fake.add_job(f"shard-{n}", task_state) for n in range(tasks)]
    fake.sweeps[ARRAY] = {
        "id": ARRAY,
        "name": "shard",
        "user": "admin",
        "array": True,
        "state": state,
        "reason": "cancelled by admin" if state == "CANCELLED" else None,
        "total": tasks,
        "submitted": tasks,
        "created_at": 1000.0,
        "finished_at": None,
        "spec": {"parallel": tasks},
        "trials": [
            {"job_id": j["id"], "trial": n, "state": task_state, "parameters": {"index": n}}
            for n, j in enumerate(jobs)
        ],
        "best": None,
    }
    return jobs


def settle(fake: FakeApi, jobs: list[dict[str, Any]], state: str, task_state: str) -> None:
    """The array and its tasks as they are once it ended."""
    for job, trial in zip(jobs, fake.sweeps[ARRAY]["trials"], strict=True):
        job["state"] = trial["state"] = task_state
    fake.sweeps[ARRAY]["state"] = state


def renamed(fake: FakeApi, job: dict[str, Any], new_id: str) -> dict[str, Any]:
    """``job`` under the id ``new_id`` (the fake's ids share their first characters)."""
    fake.jobs[new_id] = job | {"id": new_id}
    fake.events[new_id] = fake.events[job["id"]]
    fake.logs[new_id] = b""
    del fake.jobs[job["id"]]
    return fake.jobs[new_id]


def task_gets(fake: FakeApi, jobs: list[dict[str, Any]]) -> list[str]:
    """The ``GET /jobs/{id}`` requests made for one of the tasks."""
    ids = {j["id"] for j in jobs}
    return [
        r.url.path
        for r in fake.requests
        if r.method == "GET" and r.url.path.rsplit("/", 1)[-1] in ids
    ]


# -- 1. an array is judged from the array --------------------------------------------------------


def test_wait_on_a_finished_array_asks_for_the_array_not_each_task(fake: FakeApi) -> None:
    """Each task was asked for once (77 s for 1,000 tasks): now the array and its Jobs in a
    listing, a few requests in all."""
    jobs = add_array(fake, 300, "DONE", "SUCCEEDED")
    code, out, err = run("wait", ARRAY, "--poll", "0.1")
    assert code == 0, err
    assert out.splitlines() == [f"job {j['id']} ({j['name']}): SUCCEEDED" for j in jobs]
    assert task_gets(fake, jobs) == [] and len(fake.requests) <= 5, len(fake.requests)


def test_wait_json_on_an_array_prints_its_tasks_jobs_in_task_order(fake: FakeApi) -> None:
    jobs = add_array(fake, 4, "DONE", "SUCCEEDED")
    jobs[2]["state"] = fake.sweeps[ARRAY]["trials"][2]["state"] = "FAILED"
    code, out, _ = run("wait", ARRAY, "--json", "--poll", "0.1")
    assert code == 1  # a task failed
    assert json.loads(out) == jobs  # the Jobs whole, in the array's order (the listing's is not)
    assert task_gets(fake, jobs) == []


def settle_at_third_look(
    fake: FakeApi, jobs: list[dict[str, Any]], state: str, task_state: str
) -> list[int]:
    """Make the array's third ``GET /sweeps/{id}`` find it ``state`` and its tasks
    ``task_state`` (they ended meanwhile); returns the count of those GETs, kept up to date."""
    looks = [0]
    plain = fake.handler

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == f"/api/v1/sweeps/{ARRAY}":
            looks[0] += 1
            if looks[0] == 3:
                settle(fake, jobs, state, task_state)
        return plain(request)

    fake.handler = handler  # type: ignore[method-assign]
    return looks


def test_wait_on_a_cancelled_array_polls_the_array_while_its_tasks_stop(fake: FakeApi) -> None:
    """An array cancelled while its tasks still ran: each task was asked for every poll
    (1,000 requests a poll) until all had stopped; now the array once a poll."""
    jobs = add_array(fake, 3, "CANCELLED", "RUNNING")
    looks = settle_at_third_look(fake, jobs, "CANCELLED", "CANCELLED")
    # --timeout: a wait that never ends fails (124) instead of hanging the tests
    code, out, err = run("wait", ARRAY, "--timeout", "60", "--poll", "0.1")
    assert code == 1 and f"array {ARRAY} CANCELLED by admin" in err
    assert out.count(": CANCELLED") == 3
    assert task_gets(fake, jobs) == [] and looks == [3]


def test_wait_on_a_job_and_an_array_prints_each_and_exits_by_all(fake: FakeApi) -> None:
    jobs = add_array(fake, 2, "RUNNING", "RUNNING")
    job = fake.add_job("merge", "RUNNING")
    fake.progress = {job["id"]: ["RUNNING", "SUCCEEDED"]}
    settle_at_third_look(fake, jobs, "DONE", "SUCCEEDED")
    code, out, _ = run("wait", job["id"], ARRAY[:6], "--json", "--timeout", "60", "--poll", "0.1")
    assert code == 0
    assert [j["id"] for j in json.loads(out)] == [job["id"], *(j["id"] for j in jobs)]
    assert task_gets(fake, jobs) == []


# -- 2. the timeout names each thing by what it is ------------------------------------------------


def test_wait_timeout_on_an_array_names_the_array_by_its_full_id(fake: FakeApi) -> None:
    """It said ``1 job(s) not finished after 0.3s: e1035b``: an array called a job, named by
    the prefix typed."""
    add_array(fake, 2, "RUNNING", "RUNNING")
    code, _, err = run("wait", ARRAY[:6], "--timeout", "0.3", "--poll", "0.1")
    assert code == 124
    assert f"not finished after 0.3s: array {ARRAY} (shard)" in err
    assert "job(s)" not in err


def test_wait_timeout_on_a_job_and_an_array_names_each_as_what_it_is(fake: FakeApi) -> None:
    add_array(fake, 2, "RUNNING", "RUNNING")
    stuck = renamed(fake, fake.add_job("stuck", "PENDING"), "5c0ffee01234")
    done = fake.add_job("done", "SUCCEEDED")
    args = ("wait", ARRAY, stuck["id"][:6], done["id"], "--json", "--timeout", "0.3")
    code, out, err = run(*args, "--poll", "0.1")
    assert code == 124
    assert f"not finished after 0.3s: array {ARRAY} (shard), job {stuck['id']} (stuck)" in err
    assert [j["id"] for j in json.loads(out)] == [done["id"]]  # what had finished


# -- 3. a request the server did not answer in time -----------------------------------------------


def _raising(exc: type[httpx.TransportError]) -> Client:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc("timed out", request=request)

    return Client("http://127.0.0.1:18774", TOKEN, transport=httpx.MockTransport(handler))


def test_a_post_not_answered_in_time_may_have_been_carried_out() -> None:
    """A read timeout said ``cannot reach the danlu server ...: timed out; is it running?``
    while the server had made the array: sent again, it was made twice."""
    with pytest.raises(ServerUnavailable) as info:
        _raising(httpx.ReadTimeout).submit_sweep({"name": "shard"})
    text = str(info.value)
    assert "did not answer POST /api/v1/sweeps within 30 s" in text, text
    assert "may still have been carried out" in text and "`danlu sweep ls`" in text
    assert "is it running" not in text and "cannot reach" not in text
    with pytest.raises(ServerUnavailable) as info:
        _raising(httpx.ReadTimeout).get_job("abc")
    text = str(info.value)
    assert "did not answer GET /api/v1/jobs/abc within 30 s" in text, text
    assert "carried out" not in text  # a GET changes nothing
    with pytest.raises(ServerUnavailable) as info:
        _raising(httpx.ConnectTimeout).submit_sweep({"name": "shard"})
    assert "cannot reach the danlu server at http://127.0.0.1:18774" in str(info.value)
    assert "is it running?" in str(info.value)


def test_submit_not_answered_in_time_says_check_before_submitting_again(
    fake: FakeApi, tmp_path: Path
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    fake.handler = handler  # type: ignore[method-assign]
    spec = tmp_path / "job.yaml"
    spec.write_text("name: hello\ncommand: [python, -c, pass]\n")
    code, _, err = run("submit", str(spec))
    err = " ".join(err.split())
    assert code == 2 and "did not answer POST /api/v1/jobs" in err, err
    assert "check before sending it again" in err and "`danlu ls`" in err


# -- 4. metrics the retention deleted -------------------------------------------------------------


def test_metrics_of_a_purged_job_say_the_retention_deleted_them(fake: FakeApi) -> None:
    """It said ``job X has reported no metrics yet`` (exit 0), and ``-f`` nothing (exit 0)."""
    purged_at = 1_700_000_000.0
    job = renamed(fake, fake.add_job("old", "SUCCEEDED", purged_at=purged_at), "01d0b5e11234")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(purged_at))
    for extra in ([], ["-f"], ["--json"], ["--superseded"]):
        code, out, err = run("metrics", job["id"][:6], *extra)
        err = " ".join(err.split())
        assert code == 2, (extra, out, err)  # as `danlu logs` exits on a purged job
        assert f"job {job['id']}: its metric records were deleted by the retention at {when}" in err
        assert "no metrics yet" not in out
    fresh = fake.add_job("new", "SUCCEEDED")
    code, out, _ = run("metrics", fresh["id"])
    assert code == 0 and "has reported no metrics yet" in out
    code, out, _ = run("metrics", "-f", fresh["id"])
    assert code == 0 and out == ""
