"""The client and the settings at their edges, against httpx.MockTransport: whole logs
read chunk by chunk, a log follow opened again when the server ends it early, an empty
token prefix refused, ``iter_jobs`` without a job twice, and the empty ``DANLU_HOME`` /
``DANLU_PORT=0`` settings."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from danlu.cli.run import attach
from danlu.client import Client
from danlu.config import load_client_settings, load_settings
from danlu.core.errors import ConfigError, SpecError

URL = "http://danlu.test:8470"


def test_read_logs_reads_every_chunk_and_keeps_split_characters() -> None:
    log = "héllo wörld\n".encode() * 5

    def handler(request: httpx.Request) -> httpx.Response:
        offset = int(request.url.params["offset"])
        data = log[offset : offset + 4]
        return httpx.Response(200, content=data, headers={"X-Danlu-Log-Offset": str(offset + 4)})

    c = Client(URL, "tok", transport=httpx.MockTransport(handler))
    assert "".join(c.read_logs("abc")) == log.decode()
    assert c.logs("abc")[1] == 4  # one request: one chunk


class EarlyEnd:
    """A server whose follow streams end before the job does: the first stream brings
    ``start``, the second ``done``; the job is RUNNING until the third look at it."""

    def __init__(self) -> None:
        self.log = b"start\ndone\n"
        self.follows: list[int] = []
        self.looks = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/logs"):
            offset = int(request.url.params["offset"])
            if request.url.params.get("follow") == "true":
                self.follows.append(offset)
                end = 6 if len(self.follows) == 1 else len(self.log)
                return httpx.Response(200, content=self.log[offset:end])
            return httpx.Response(200, content=self.log[offset:])
        if request.url.path.endswith("/why"):
            return httpx.Response(200, json={"id": "abc", "state": "RUNNING", "reason": "x"})
        self.looks += 1
        state = "SUCCEEDED" if self.looks >= 3 else "RUNNING"
        return httpx.Response(200, json={"id": "abc", "state": state, "exit_code": 0})


def test_follow_logs_reconnects_from_the_offset_until_the_job_ends() -> None:
    server = EarlyEnd()
    c = Client(URL, "tok", transport=httpx.MockTransport(server))
    assert "".join(c.follow_logs("abc", reconnect_delay=0)) == "start\ndone\n"
    assert server.follows == [0, 6, 11]  # the third stream found nothing new, then it ended


def test_danlu_run_attach_follows_past_an_early_end(capsys: pytest.CaptureFixture[str]) -> None:
    server = EarlyEnd()
    c = Client(URL, "tok", transport=httpx.MockTransport(server))
    assert attach(c, "abc") == 0
    assert capsys.readouterr().out == "start\ndone\n"


def test_an_empty_token_prefix_is_refused_and_none_revokes_all() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"revoked": 2})

    c = Client(URL, "tok", transport=httpx.MockTransport(handler))
    with pytest.raises(SpecError, match="prefix is empty"):
        c.revoke_tokens("bob", "")
    assert seen == []
    assert c.revoke_tokens("bob") == 2
    assert seen[-1].method == "DELETE" and seen[-1].url.path == "/api/v1/users/bob/tokens"
    c.revoke_tokens("bob", "dl_ab")
    assert seen[-1].url.path == "/api/v1/users/bob/tokens/dl_ab"


def test_iter_jobs_yields_no_job_twice_when_one_is_submitted_meanwhile() -> None:
    jobs = [{"id": f"j{i:02d}"} for i in range(25, 0, -1)]  # newest first

    def handler(request: httpx.Request) -> httpx.Response:
        offset, limit = int(request.url.params["offset"]), int(request.url.params["limit"])
        page = jobs[offset : offset + limit]
        if offset == 0:
            jobs.insert(0, {"id": "j26"})  # submitted after the first page was read
        return httpx.Response(200, json=page)

    c = Client(URL, "tok", transport=httpx.MockTransport(handler))
    ids = [j["id"] for j in c.iter_jobs(page=10)]  # by offset: the server ignores before_id
    assert len(ids) == len(set(ids))
    assert {f"j{i:02d}" for i in range(1, 26)} <= set(ids)


def test_an_empty_danlu_home_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    for value in ("", "  "):
        monkeypatch.setenv("DANLU_HOME", value)
        assert load_settings().home == Path("~/.danlu").expanduser()
        assert load_client_settings().home == Path("~/.danlu").expanduser()
    monkeypatch.setenv("DANLU_HOME", "/srv/danlu")
    assert load_settings().home == Path("/srv/danlu")


def test_danlu_port_0_means_any_free_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DANLU_PORT", "0")
    assert load_settings().port == 0
    monkeypatch.setenv("DANLU_PORT", "-1")
    with pytest.raises(ConfigError, match=r"DANLU_PORT: .*0\.\.65535"):
        load_settings()


class ChangingQueue:
    """``GET /jobs`` over jobs that change state while a client pages through them: newest
    first, filtered by ``state``, sliced by ``offset`` and ``limit``; ``between`` runs after
    each answer (a job leaves the state, a job is submitted)."""

    def __init__(self, count: int, between: Callable[[ChangingQueue], None]) -> None:
        self.jobs = [{"id": f"j{i:03d}", "state": "PENDING"} for i in range(count, 0, -1)]
        self.between = between
        self.requests = 0
        self.left: set[str] = set()

    def leave(self, job: dict[str, str]) -> None:
        job["state"] = "RUNNING"
        self.left.add(job["id"])

    def __call__(self, request: httpx.Request) -> httpx.Response:
        offset, limit = int(request.url.params["offset"]), int(request.url.params["limit"])
        states = request.url.params.get_list("state")
        found = [dict(j) for j in self.jobs if not states or j["state"] in states]
        self.requests += 1
        page = found[offset : offset + limit]
        self.between(self)
        return httpx.Response(200, json=page)


def _pending(queue: ChangingQueue) -> list[dict[str, str]]:
    return [j for j in queue.jobs if j["state"] == "PENDING"]


@pytest.mark.parametrize("page", [1, 3, 10])
def test_iter_jobs_with_a_state_misses_no_job_when_yielded_ones_leave_the_state(page: int) -> None:
    """Paged by offset, a job that left the state between two pages shifted the later ones
    forward and one that stayed was never yielded."""

    def between(queue: ChangingQueue) -> None:
        pending = _pending(queue)
        if queue.requests % 2 and pending:
            queue.leave(pending[0])  # the newest, already yielded, starts
        if queue.requests % 3 == 0:
            queue.jobs.insert(0, {"id": f"new{queue.requests}", "state": "PENDING"})

    queue = ChangingQueue(40, between)
    c = Client(URL, "tok", transport=httpx.MockTransport(queue))
    ids = [j["id"] for j in c.iter_jobs("PENDING", page=page)]
    assert len(ids) == len(set(ids))
    stayed = {f"j{i:03d}" for i in range(1, 41)} - queue.left
    assert stayed <= set(ids), sorted(stayed - set(ids))


def test_iter_jobs_misses_no_job_when_many_leave_at_once_or_the_last_one_seen_does() -> None:
    def between(queue: ChangingQueue) -> None:
        if queue.requests == 1:
            for job in _pending(queue)[:8]:  # the whole first page and more start
                queue.leave(job)

    queue = ChangingQueue(30, between)
    c = Client(URL, "tok", transport=httpx.MockTransport(queue))
    ids = [j["id"] for j in c.iter_jobs("PENDING", page=5)]
    assert len(ids) == len(set(ids))
    assert {f"j{i:03d}" for i in range(1, 31)} - queue.left <= set(ids)


@pytest.mark.parametrize(
    "spec", ["4x80GiB", "1x80GiB", "2xH100,4x40GiB:A100-40GB", "2x80GiB,4x40GiB", "4x40GiB:A100"]
)
def test_fake_gpus_settings_take_what_the_server_builds(spec: str) -> None:
    """DANLU_FAKE_GPUS was checked with one grammar and built with another: forms that
    fake_inventory documents were refused at start-up."""
    from danlu.devices.inventory import fake_inventory

    groups = load_settings(fake_gpus=spec).fake_groups
    assert groups is not None
    built = fake_inventory(spec)
    assert [[g.gpu_type] * g.count for g in groups] == [
        [g.gpu_type for g in n.gpus] for n in built.nodes
    ]


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("2x8xH100", "one node"),  # passed the settings, then failed at start-up
        ("4x80", "give the size a unit"),
        ("4x512MiB", "too small"),
        ("1x8388608TiB", "too large a size"),  # crashed the start-up (OverflowError)
        ("1025x80GiB", "at most 1024 GPUs a node"),
        pytest.param(",".join(["1000x80GiB"] * 101), "100,000 in all", id="101 nodes of 1000"),
        pytest.param("9" * 5000 + "x80GiB", "at most 1024 GPUs a node", id="5000 digits"),
        ("lots", "COUNTxSIZE"),
    ],
)
def test_fake_gpus_settings_refuse_naming_the_variable(spec: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(fake_gpus=spec)
    assert str(info.value).startswith("DANLU_FAKE_GPUS: ") and needle in str(info.value)


@pytest.mark.parametrize(
    ("variable", "attribute", "default"),
    [
        ("DANLU_SLURM_PARTITION", "slurm_partition", None),
        ("DANLU_PORT", "port", 8470),
        ("DANLU_EXECUTOR", "executor", "local"),
        ("DANLU_POLICY", "policy", "priority"),
        ("DANLU_INTERVAL", "interval", 2.0),
        ("DANLU_RUN_AS", "run_as", "server"),
        ("DANLU_SLURM_GPU_TYPE", "slurm_gpu_type", "generic"),
    ],
)
def test_an_empty_danlu_variable_is_unset(
    monkeypatch: pytest.MonkeyPatch, variable: str, attribute: str, default: object
) -> None:
    monkeypatch.setenv(variable, "")
    assert getattr(load_settings(), attribute) == default


def test_an_empty_trace_modules_still_traces_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/api.md: ``DANLU_TRACE_MODULES`` empty: none (not the default)."""
    monkeypatch.setenv("DANLU_TRACE_MODULES", "")
    assert load_settings().trace_module_names == ()


def test_an_empty_or_blank_danlu_url_or_token_is_unset(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from danlu.cli.jobs import default_client

    (tmp_path / "server.json").write_text('{"url": "http://127.0.0.1:8470"}')
    (tmp_path / "admin.token").write_text("dl_admin")
    for blank in ("", "  "):
        monkeypatch.setenv("DANLU_URL", blank)
        monkeypatch.setenv("DANLU_TOKEN", blank)
        settings = load_client_settings()
        assert (settings.url, settings.token) == (None, None)
        with default_client(tmp_path, None, None) as c:
            assert (c.url, c.token) == ("http://127.0.0.1:8470", "dl_admin")
