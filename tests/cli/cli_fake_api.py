"""An in-memory stand-in for the danlu server, as an ``httpx.MockTransport`` handler.

It follows docs/api.md closely enough for the client and CLI tests: bearer auth, the error body
``{"error": {"type", "field", "message"}}``, jobs with states, events, logs with the offset
header, nodes and allocations of a fake 1 x 2 x 80 GiB cluster.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer

from danlu.core.errors import SpecError
from danlu.core.spec import parse_spec

GiB = 1024**3
TOKEN = "secret-token"
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}


def error(status: int, kind: str, field: str | None, message: str) -> httpx.Response:
    body = {"error": {"type": kind, "field": field, "message": message}}
    return httpx.Response(status, json=body)


class FakeApi:
    """State plus a ``handler`` for ``httpx.MockTransport``."""

    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, Any]] = {}
        self.events: dict[str, list[dict[str, Any]]] = {}
        self.logs: dict[str, bytes] = {}
        self.requests: list[httpx.Request] = []
        self.next = 0
        self.progress: dict[str, list[str]] = {}
        """Per job id, the states its next GETs find it in, one per GET (then it stays)."""
        self.submitted_progress: list[str] = []
        """The ``progress`` of the next job submitted."""
        self.log_chunk = 1 << 20
        """The most log bytes one ``GET /jobs/{id}/logs`` answers (the server's LOG_CHUNK)."""
        self.sweeps: dict[str, dict[str, Any]] = {}
        """Sweeps and job arrays by id, as ``GET /sweeps/{id}`` answers them."""
        self.metrics: dict[str, list[dict[str, Any]]] = {}
        """Per job id, its metric records in arrival order, each with its ``id``."""
        self.metric_arrivals: list[list[dict[str, Any]]] = []
        """Records the job reports next: each ``GET /jobs/{id}/metrics`` stores one batch
        before it answers."""
        self.webhooks: dict[str, dict[str, Any]] = {}
        """Webhooks by id, as ``GET /webhooks`` lists them."""
        self.deliveries: dict[str, list[dict[str, Any]]] = {}
        """Per webhook id, its deliveries as ``GET /webhooks/{id}/deliveries`` answers."""
        self.whys: dict[str, str] = {}
        """Per job id, the ``reason`` its ``GET /jobs/{id}/why`` answers where set (the
        server's words for a job not pending: ``failed: out of memory ...``)."""

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handler)

    # -- helpers used by tests ---------------------------------------------------------------

    def add_job(self, name: str, state: str = "PENDING", **extra: Any) -> dict[str, Any]:
        self.next += 1
        job_id = f"{self.next:012x}"
        job = {
            "id": job_id,
            "name": name,
            "project": "default",
            "user": "admin",
            "priority": 0,
            "state": state,
            "restarts": 0,
            "preemptions": 0,
            "submitted_at": 1000.0 + self.next,
            "started_at": None,
            "finished_at": None,
            "exit_code": None,
            "pending_reason": "waiting for 1 GPU(s)" if state == "PENDING" else None,
            "held_at": None,
            "allocation": [],
            "gpus": 1,
            "gpu_memory": 20 * GiB,
            "batch_size": None,
            "checkpoint_step": None,
            "observed": {},
            "spec": {"name": name, "command": ["python", "-c", "print('hi')"]},
        } | extra
        self.jobs[job_id] = job
        self.events[job_id] = [
            {
                "id": 1,
                "job_id": job_id,
                "time": 1000.0,
                "old": None,
                "new": "PENDING",
                "reason": "submitted",
            }
        ]
        self.logs[job_id] = b""
        return job

    def _find(self, key: str) -> dict[str, Any] | httpx.Response:
        hits = [j for i, j in self.jobs.items() if i.startswith(key)]
        if len(hits) != 1:
            return error(404, "NotFoundError", "id", f"job {key!r} not found")
        return hits[0]

    # -- the handler -------------------------------------------------------------------------

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path = request.url.path.removeprefix("/api/v1")
        if path == "/health":
            return httpx.Response(200, json={"status": "ok", "version": "0.1.0"})
        if request.headers.get("authorization") != f"Bearer {TOKEN}":
            return error(401, "AuthError", None, "missing or invalid API token")
        method = request.method
        if path == "/jobs" and method == "POST":
            return self._submit(json.loads(request.content))
        if path == "/jobs" and method == "GET":
            return self._list(request)
        if path == "/cluster/nodes":
            return httpx.Response(200, json=self._nodes())
        if path == "/cluster/allocations":
            allocs = [{"job_id": j["id"], **a} for j in self.jobs.values() for a in j["allocation"]]
            return httpx.Response(200, json=allocs)
        if path == "/users/me":
            return httpx.Response(200, json={"name": "admin", "role": "admin"})
        if path == "/sweeps" and method == "GET":
            return httpx.Response(200, json=list(self.sweeps.values()))
        if path == "/webhooks" and method == "GET":
            return httpx.Response(200, json=list(self.webhooks.values()))
        hook = re.fullmatch(r"/webhooks/([^/]+)/deliveries", path)
        if hook and method == "GET":
            if hook.group(1) not in self.webhooks:
                return error(404, "NotFoundError", "id", f"webhook {hook.group(1)!r} not found")
            return httpx.Response(200, json=self.deliveries.get(hook.group(1), []))
        sweep = re.fullmatch(r"/sweeps/([^/]+)", path)
        if sweep:
            if sweep.group(1) not in self.sweeps:
                return error(404, "NotFoundError", "id", f"sweep {sweep.group(1)!r} not found")
            return httpx.Response(200, json=self.sweeps[sweep.group(1)])
        match = re.fullmatch(r"/jobs/([^/]+)(/[a-z]+)?", path)
        if match:
            found = self._find(match.group(1))
            if isinstance(found, httpx.Response):
                return found
            return self._job_route(found, match.group(2) or "", request)
        return error(404, "http", None, f"no route {method} {path}")

    def _submit(self, body: dict[str, Any]) -> httpx.Response:
        try:
            spec = parse_spec(body)
        except SpecError as exc:
            return error(422, "SpecError", exc.field, exc.message)
        if spec.resources.gpus.min > 2:
            return error(
                422, "AdmissionError", "resources.gpus", "needs 3 GPUs; the largest node has 2"
            )
        job = self.add_job(spec.name, priority=spec.priority, gpus=spec.resources.gpus.min)
        job["spec"] = body
        self.progress[job["id"]], self.submitted_progress = self.submitted_progress, []
        return httpx.Response(201, json=job)

    def _patch(self, job: dict[str, Any], body: dict[str, Any]) -> httpx.Response:
        """``PATCH /jobs/{id}`` as docs/api.md has it: ``priority`` set, ``held`` true holds
        an unfinished job (``held_at`` set; a finished one is 409), false releases it (a job
        not held is answered as it is)."""
        if body.get("held") is True and job["state"] in TERMINAL:
            return error(409, "ConflictError", "held", f"job {job['id']} is {job['state']}")
        if "held" in body:
            job["held_at"] = (job.get("held_at") or 1900.0) if body["held"] else None
        if "priority" in body:
            job["priority"] = body["priority"]
        return httpx.Response(200, json=job)

    def end_job(self, job_id: str, state: str, reason: str, time: float = 2000.0) -> None:
        """End the job in ``state`` with the event that says ``reason``, which becomes its
        ``end_reason`` as the server gives it."""
        job = self.jobs[job_id]
        event = {"id": 1 + len(self.events[job_id]), "job_id": job_id, "time": time}
        self.events[job_id].append(event | {"old": job["state"], "new": state, "reason": reason})
        job.update(state=state, finished_at=time, pending_reason=None, end_reason=reason)

    def _list(self, request: httpx.Request) -> httpx.Response:
        states = request.url.params.get_list("state")
        jobs = [j for j in reversed(self.jobs.values()) if not states or j["state"] in states]
        for key in ("project", "user"):
            if key in request.url.params:
                jobs = [j for j in jobs if j[key] == request.url.params[key]]
        offset = int(request.url.params.get("offset", 0))
        limit = int(request.url.params.get("limit", 1000))
        return httpx.Response(200, json=jobs[offset : offset + limit])

    def _job_route(self, job: dict[str, Any], tail: str, request: httpx.Request) -> httpx.Response:
        job_id = job["id"]
        if tail == "" and request.method == "PATCH":
            return self._patch(job, json.loads(request.content))
        if tail == "":
            if self.progress.get(job_id):
                job["state"] = self.progress[job_id].pop(0)
            return httpx.Response(200, json=job)
        if tail == "/cancel":
            if job["state"] in TERMINAL:
                return error(
                    409, "ConflictError", "state", f"job {job_id} is already {job['state']}"
                )
            job["state"] = "CANCELLED"
            return httpx.Response(200, json=job)
        if tail == "/events":
            after = int(request.url.params.get("after_id", 0))
            limit = int(request.url.params.get("limit", 100))
            found = [e for e in self.events[job_id] if e["id"] > after][:limit]
            return httpx.Response(200, json=found)
        if tail == "/why":
            reason = self.whys.get(job_id) or job["pending_reason"] or f"the job is {job['state']}"
            return httpx.Response(200, json={"id": job_id, "state": job["state"], "reason": reason})
        if tail == "/metrics":
            return self._metrics(job_id, request)
        if tail == "/logs":
            offset = int(request.url.params.get("offset", 0))
            data = self.logs[job_id][offset : offset + self.log_chunk]
            headers = {"X-Danlu-Log-Offset": str(offset + len(data))}
            return httpx.Response(200, content=data, headers=headers)
        return error(404, "http", None, f"no route {tail}")

    def add_metrics(self, job_id: str, records: list[dict[str, Any]]) -> None:
        """Store ``records`` for the job, each with the next record id."""
        stored = self.metrics.setdefault(job_id, [])
        for record in records:
            stored.append({"id": len(stored) + 1, **record})

    def _metrics(self, job_id: str, request: httpx.Request) -> httpx.Response:
        """``GET /jobs/{id}/metrics`` as the server answers it: by step then arrival, or by
        arrival after ``after_id``; the cursor header is the last record id covered."""
        if self.metric_arrivals:
            self.add_metrics(job_id, self.metric_arrivals.pop(0))
        params = request.url.params
        stored = self.metrics.get(job_id, [])
        after_step = int(params.get("after_step", -1))
        limit = int(params.get("limit", 1000))
        rows = [r for r in stored if r["step"] > after_step]
        if "after_id" in params:
            after_id = int(params["after_id"])
            rows = [r for r in rows if r["id"] > after_id][:limit]
            cursor = rows[-1]["id"] if rows else after_id
        else:
            rows.sort(key=lambda r: (r["step"], r["id"]))
            rows = rows[-limit:] if params.get("tail") == "true" else rows[:limit]
            cursor = max((r["id"] for r in stored), default=0)
        body = [{k: v for k, v in r.items() if k != "id"} for r in rows]
        return httpx.Response(200, json=body, headers={"X-Danlu-Metrics-Cursor": str(cursor)})

    def _nodes(self) -> list[dict[str, Any]]:
        gpus = []
        for index in range(2):
            on = [(j, a) for j in self.jobs.values() for a in j["allocation"] if a["gpu"] == index]
            gpus.append(
                {
                    "index": index,
                    "type": "H100",
                    "memory": 80 * GiB,
                    "allocated_memory": sum(a["memory"] for _, a in on),
                    "allocated_milli": sum(a["milli"] for _, a in on),
                    "jobs": [j["id"] for j, _ in on],
                }
            )
        return [
            {"name": "node-0", "gpu_type": "H100", "rack": "rack-0", "fake": True, "gpus": gpus}
        ]


def serve_commands(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    """A new :class:`FakeApi` that every command's client talks to (``client_factory``
    replaced for the test)."""
    from danlu.cli import jobs as jobs_cli
    from danlu.client import Client

    api = FakeApi()

    def factory(home: Path | None, url: str | None, token: str | None) -> Client:
        return Client("http://fake", TOKEN, transport=api.transport())

    monkeypatch.setattr(jobs_cli, "client_factory", factory)
    return api


def metrics_and_events_app() -> typer.Typer:
    """A bare CLI app of the ``metrics`` and ``events`` commands (their follow loops)."""
    from danlu.cli import events as events_cli
    from danlu.cli import metrics as metrics_cli

    app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
    metrics_cli.register(app)
    events_cli.register(app)
    return app


def jobs_app() -> typer.Typer:
    """A bare CLI app of the job commands (``submit``, ``show``, ...)."""
    from danlu.cli import jobs as jobs_cli

    app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
    jobs_cli.register(app)
    return app


def serve_jobs_commands(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    """:func:`serve_commands`, with the job commands printing to a console 300 columns wide
    (no line of a table wrapped)."""
    from rich.console import Console

    from danlu.cli import jobs as jobs_cli

    fake = serve_commands(monkeypatch)
    monkeypatch.setattr(jobs_cli, "console", Console(width=300))
    return fake


def invoke(app: typer.Typer, *args: str) -> tuple[int, str, str]:
    """Run ``app`` with ``args``: its exit code, stdout and stderr (an exception other than
    an exit is raised)."""
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


RAW_CONTROLS = ("\x1b", "\x9b", "\r", "\u202e")
"""What must never reach the terminal raw from server text: ESC, a C1 CSI, a carriage
return and a bidi override (a line break is checked by a table's row count)."""


def no_raw_control(text: str) -> None:
    """Fail when ``text`` holds one of :data:`RAW_CONTROLS`."""
    for char in RAW_CONTROLS:
        assert char not in text, (char, text)


def serve_replies(
    monkeypatch: pytest.MonkeyPatch, replies: dict[str, Any], missing: str = "no route"
) -> None:
    """Every command's client talks to a stub that answers ``GET`` of a path (without
    ``/api/v1``) in ``replies`` with its JSON, as it is (fields of any type, text the API
    refuses), and any other request with a 404 (its message ``missing`` and the path); the
    job commands print to a console 250 columns wide."""
    from rich.console import Console

    from danlu.cli import jobs as jobs_cli
    from danlu.client import Client

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path.removeprefix("/api/v1")
        if path in replies:
            return httpx.Response(200, json=replies[path])
        return error(404, "NotFoundError", None, f"{missing} {path}")

    def factory(home: Path | None, url: str | None, token: str | None) -> Client:
        return Client("http://fake", TOKEN, transport=httpx.MockTransport(handler))

    monkeypatch.setattr(jobs_cli, "client_factory", factory)
    monkeypatch.setattr(jobs_cli, "console", Console(width=250))
