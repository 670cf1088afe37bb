"""Waiting (:meth:`Client.wait`, :func:`~danlu.client.waits.resolve`,
:func:`~danlu.client.waits.wait_all`) reads only replies for what it asked: a job or sweep
reply without an ``id``, or for another job or sweep, a sweep's ``trials`` of the wrong
type or a trial naming no ``job_id`` are a ServerError naming the request (they were a bare
KeyError or TypeError, or a wait on the wrong job); a ``created_at`` of ``true`` is no time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from danlu.client import Client
from danlu.client.errors import ServerError
from danlu.client.waits import Waited, resolve, trial_jobs, wait_all

JOB = "abcdef123456"
SWEEP = "5eed00000001"


def client_of(routes: dict[str, Any], seen: list[httpx.Request] | None = None) -> Client:
    """A client whose server answers ``routes[path]`` (the path after ``/api/v1``), 404
    for any other path."""

    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        path = request.url.path.removeprefix("/api/v1")
        if path not in routes:
            return httpx.Response(404, json={"error": {"type": "NotFoundError", "message": "no"}})
        return httpx.Response(200, json=routes[path])

    return Client("http://danlu.test", "tok", transport=httpx.MockTransport(handler))


def job(ident: str = JOB, state: str = "SUCCEEDED", name: str = "train") -> dict[str, Any]:
    return {"id": ident, "name": name, "state": state}


def finished_sweep(trials: Any, **extra: Any) -> dict[str, Any]:
    return {"id": SWEEP, "name": "lr", "state": "SUCCEEDED", "trials": trials, **extra}


CALLS: dict[str, Callable[[Client], Any]] = {
    "resolve": lambda c: resolve(c, "abcd"),
    "wait": lambda c: c.wait(["abcd"], poll=0.01, timeout=5),
    "wait_all": lambda c: wait_all(c, [Waited("job", "abcd", "train")], timeout=5, poll=0.01),
}


@pytest.mark.parametrize("name", sorted(CALLS))
@pytest.mark.parametrize("reply", [{"name": "train", "state": "SUCCEEDED"}, job("ffff99999999")])
def test_a_job_reply_not_for_the_job_asked_is_a_server_error(
    name: str, reply: dict[str, Any]
) -> None:
    with client_of({"/jobs/abcd": reply}) as client, pytest.raises(ServerError) as caught:
        CALLS[name](client)
    text = str(caught.value)
    assert text.startswith("GET /api/v1/jobs/abcd: the reply"), text
    assert "'abcd'" in text


def test_a_sweep_reply_without_an_id_is_a_server_error() -> None:
    routes = {"/sweeps/5eed": {"name": "lr", "state": "RUNNING", "trials": []}}
    with client_of(routes) as client, pytest.raises(ServerError) as caught:
        resolve(client, "5eed")
    assert "GET /api/v1/sweeps/5eed: the reply has no id" in str(caught.value)


def test_a_prefix_answered_by_its_full_id_is_waited_for_in_any_case() -> None:
    routes = {"/jobs/ABCD": job(), f"/jobs/{JOB}": job()}
    with client_of(routes) as client:
        waited = resolve(client, "ABCD")
        assert waited == Waited("job", JOB, "train")
        assert client.wait(["ABCD"], poll=0.01, timeout=5) == [job()]
        ends = wait_all(client, [Waited("job", "ABCD", "train")], timeout=5, poll=0.01)
        assert ends[0].waited.id == "ABCD" and ends[0].jobs == [job()]


@pytest.mark.parametrize(
    ("trials", "says"),
    [
        ({"t": 1}, "its trials are a dict, not a JSON array"),
        (5, "its trials are a int, not a JSON array"),
        ("abc", "its trials are a str, not a JSON array"),
        ([{"state": "SUCCEEDED"}], "its trial 0 names no job_id"),
        ([{"job_id": JOB}, "x"], "its trial 1 names no job_id"),
        ([{"job_id": 7, "state": "SUCCEEDED"}], "its trial 0 names no job_id"),
    ],
)
def test_a_sweep_with_odd_trials_is_a_server_error(trials: Any, says: str) -> None:
    routes = {f"/sweeps/{SWEEP}": finished_sweep(trials), f"/jobs/{JOB}": job()}
    waited = [Waited("sweep", SWEEP, "lr")]
    with client_of(routes) as client, pytest.raises(ServerError) as caught:
        wait_all(client, waited, timeout=5, poll=0.01)
    assert str(caught.value) == f"GET /api/v1/sweeps/{SWEEP}: {says}"


def test_a_trial_job_answered_for_another_job_is_a_server_error() -> None:
    routes = {f"/jobs/{JOB}": job("0123456789ab")}
    with client_of(routes) as client, pytest.raises(ServerError) as caught:
        trial_jobs(client, finished_sweep([{"job_id": JOB}]))
    assert f"GET /api/v1/jobs/{JOB}: the reply is for '0123456789ab'" in str(caught.value)


def test_a_sweep_with_its_trials_ends_with_their_jobs() -> None:
    other = "0123456789ab"
    trials = [{"job_id": JOB, "state": "SUCCEEDED"}, {"job_id": other, "state": "FAILED"}]
    routes = {
        f"/sweeps/{SWEEP}": finished_sweep(trials, created_at=1_700_000_000.5),
        "/jobs": [job(other, "FAILED", "lr-2"), job(JOB, name="lr-1")],
    }
    seen: list[httpx.Request] = []
    with client_of(routes, seen) as client:
        (end,) = wait_all(client, [Waited("sweep", SWEEP, "lr")], timeout=5, poll=0.01)
    assert [j["id"] for j in end.jobs] == [JOB, other]
    (listed,) = [r for r in seen if r.url.path == "/api/v1/jobs"]
    assert listed.url.params["since"] == "1700000000.5"


@pytest.mark.parametrize("created", [True, False, "1700000000", None, 10**400])
def test_a_created_at_that_is_not_a_number_is_no_since(created: Any) -> None:
    """``true`` was read as 1.0 (a bool is an int to Python) and sent as ``since=1.0``."""
    trials = [{"job_id": JOB}, {"job_id": "0123456789ab"}]
    routes = {"/jobs": [job(), job("0123456789ab")]}
    seen: list[httpx.Request] = []
    with client_of(routes, seen) as client:
        jobs = trial_jobs(client, finished_sweep(trials, created_at=created))
    assert len(jobs) == 2
    (listed,) = [r for r in seen if r.url.path == "/api/v1/jobs"]
    assert "since" not in listed.url.params, listed.url
