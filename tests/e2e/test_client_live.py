"""danlu.client against a real ``danlu up`` subprocess: every route of docs/api.md answers what
the client expects, and the server's errors arrive as the documented DanluError subclasses with
the server's field and message."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2e_server import Server, danlu

from danlu import client as api
from danlu.client import Client
from danlu.core.errors import SpecError, UnschedulableError

pytestmark = pytest.mark.slow
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}


def py(code: str, name: str, **extra: Any) -> dict[str, Any]:
    spec = {"name": name, "command": [sys.executable, "-c", code]}
    spec["resources"] = {"gpus": 1, "gpu_memory": "10GiB"}
    return spec | extra


def wait_state(client: Client, job: str, states: set[str], timeout: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        data = client.get_job(job)
        if data["state"] in states or time.monotonic() > deadline:
            return data
        time.sleep(0.1)


def test_every_route_against_a_live_server(shared_server: Server) -> None:
    admin = shared_server.client()
    assert admin.health()["status"] == "ok"
    assert admin.me()["role"] == "admin"

    # jobs: submit, get by prefix, events, why, logs (plain and follow), metrics
    talky = admin.submit(
        py(
            "import time\nfor i in range(3):\n    print('line', i, flush=True); time.sleep(0.2)",
            "talky",
        )
    )
    assert talky["state"] in {"PENDING", "RUNNING"}
    assert admin.get_job(talky["id"][:8])["id"] == talky["id"]
    followed = "".join(admin.follow_logs(talky["id"]))
    assert "line 0" in followed and "line 2" in followed
    done = wait_state(admin, talky["id"], TERMINAL)
    assert done["state"] == "SUCCEEDED" and done["exit_code"] == 0
    text, offset = admin.logs(talky["id"])
    assert "line 2" in text and offset == len(text.encode())
    assert admin.logs(talky["id"], offset) == ("", offset)
    events = admin.events(talky["id"])
    assert [e["new"] for e in events][-1] == "SUCCEEDED"
    assert events[0]["new"] == "PENDING"
    why = admin.why(talky["id"])
    assert why["id"] == talky["id"] and why["state"] == "SUCCEEDED" and why["reason"]
    assert (
        admin.post_metrics(talky["id"], [{"step": 1, "loss": 0.5}, {"step": 2, "loss": 0.4}]) == 2
    )
    assert [m["step"] for m in admin.metrics(talky["id"])] == [1, 2]

    # cancel a running job; cancelling it again is a conflict
    sleeper = admin.submit(py("import time; time.sleep(60)", "sleeper"))
    wait_state(admin, sleeper["id"], {"RUNNING"})
    admin.cancel(sleeper["id"])
    assert wait_state(admin, sleeper["id"], TERMINAL)["state"] == "CANCELLED"
    with pytest.raises(api.ConflictError) as conflict:
        admin.cancel(sleeper["id"])
    assert conflict.value.status == 409 and conflict.value.message

    # listing and filters
    succeeded = {j["id"] for j in admin.list_jobs(["SUCCEEDED"])}
    assert talky["id"] in succeeded and sleeper["id"] not in succeeded
    every = [j["id"] for j in admin.iter_jobs(page=1)]
    assert len(every) == len(set(every)) and {talky["id"], sleeper["id"]} <= set(every)

    # cluster
    nodes = admin.nodes()
    assert sum(len(n["gpus"]) for n in nodes) == 4
    assert all(g["memory"] == 80 * 1024**3 for n in nodes for g in n["gpus"])
    assert isinstance(admin.allocations(), list)

    # projects
    created = admin.create_project("vision", priority=2, quota_gpus=2)
    assert created["name"] == "vision" and created["priority"] == 2
    assert admin.update_project("vision", priority=5)["priority"] == 5
    assert "vision" in {p["name"] for p in admin.projects()}

    # users and tokens: alice sees only her own jobs
    assert admin.create_user("alice")["role"] == "user"
    alice = Client(admin.url, admin.create_token("alice", "laptop"))
    assert alice.me() == {
        "name": "alice",
        "role": "user",
        "os_user": None,
        "quota_gpus": None,
        "disabled_at": None,
        "disabled_by": None,
        "disable_reason": None,
    }
    mine = alice.submit(py("print('alice')", "alices-job"))
    assert [j["id"] for j in alice.list_jobs()] == [mine["id"]]
    with pytest.raises(api.PermissionDenied) as denied:
        alice.get_job(talky["id"])
    assert denied.value.status == 403
    with pytest.raises(api.PermissionDenied):
        alice.create_project("mine")
    alice.close()


def test_server_errors_map_to_danlu_errors(shared_server: Server) -> None:
    admin = shared_server.client()
    with pytest.raises(api.NotFoundError) as missing:
        admin.get_job("feedfacecafe")
    assert missing.value.status == 404 and "feedfacecafe" in missing.value.message

    with pytest.raises(api.InvalidRequestError) as bad:
        admin.submit({"name": "x", "command": [sys.executable], "resources": {"gpus": -1}})
    assert isinstance(bad.value, SpecError)
    assert bad.value.field == "resources.gpus" and bad.value.status == 422

    with pytest.raises(UnschedulableError) as too_big:
        admin.submit(py("pass", "huge", resources={"gpus": 5}))
    assert isinstance(too_big.value, api.UnschedulableRequestError)
    assert too_big.value.status == 422 and too_big.value.message

    with pytest.raises(api.AuthError):
        Client(admin.url, "dl_not_a_token").me()
    with pytest.raises(api.AuthError):
        Client(admin.url, None).list_jobs()
    assert Client(admin.url, None).health()["status"] == "ok"  # health needs no token


def test_cli_top_and_nodes_against_a_live_server(shared_server: Server) -> None:
    admin = shared_server.client()
    visible = admin.submit(py("import time; time.sleep(300)", "visible"))
    top = danlu("top", "--once", "--home", str(shared_server.home))
    assert top.returncode == 0, top.stderr
    assert "4 GPU(s)" in top.stdout and "visible" in top.stdout
    nodes = danlu("nodes", "--home", str(shared_server.home))
    assert nodes.returncode == 0 and "80.0GiB" in nodes.stdout
    missing = danlu("show", "nope-nope", "--home", str(shared_server.home))
    assert missing.returncode == 2 and "not found" in missing.stderr
    admin.cancel(visible["id"])  # leave no job running after the server stops
    assert wait_state(admin, visible["id"], TERMINAL)["state"] == "CANCELLED"


def test_up_prints_where_its_dashboard_is(shared_server: Server) -> None:
    deadline = time.monotonic() + 10
    while "dashboard: " not in shared_server.output() and time.monotonic() < deadline:
        time.sleep(0.05)
    line = next(x for x in shared_server.output().splitlines() if x.startswith("dashboard: "))
    url = line.removeprefix("dashboard: ")
    assert url.endswith("/dashboard/")
    page = httpx.get(url, timeout=10)
    assert page.status_code == 200 and "<title>danlu</title>" in page.text


def test_a_second_server_on_the_same_home_is_refused(shared_server: Server) -> None:
    home = shared_server.home
    pid = shared_server.proc.pid
    second = danlu("up", "--home", str(home), "--fake-gpus", "1x80GiB", "--port", "0")
    assert second.returncode == 3, second.stdout + second.stderr  # another plane's: not restarted
    said = " ".join(second.stderr.split())  # the console wraps long lines
    assert "in use by another danlu server" in said
    assert f"pid {pid}" in said  # names the running server
    with shared_server.client() as client:  # the first one is untouched
        assert client.health()["status"] == "ok"


def test_up_checks_the_policy_options_before_serving(tmp_path: Path) -> None:
    """``--policy-option`` reaches the policy: a value out of range stops ``danlu up`` with
    an error naming the flag and the option; a malformed pair is refused as such."""
    base = ("up", "--home", str(tmp_path / "home"), "--fake-gpus", "1x80GiB", "--port", "0")
    out_of_range = danlu(*base, "--policy", "danlu", "--policy-option", "hysteresis=2")
    assert out_of_range.returncode == 2, out_of_range.stdout + out_of_range.stderr
    said = " ".join(out_of_range.stderr.split())  # the console wraps long lines
    assert "--policy-option" in said and "hysteresis must be in [0, 1), got 2" in said
    assert "danlu is up" not in out_of_range.stdout
    malformed = danlu(*base, "--policy-option", "hysteresis")
    assert malformed.returncode == 2
    assert "must look like key=value" in " ".join(malformed.stderr.split())
