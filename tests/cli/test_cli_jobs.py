"""``danlu submit / ls / show / logs / cancel / why / nodes / top`` through Typer's CliRunner,
against the in-memory API of ``cli_fake_api`` (an httpx.MockTransport)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from cli_fake_api import TOKEN, FakeApi, GiB
from rich.console import Console
from typer.testing import CliRunner

from danlu.cli import jobs as jobs_cli
from danlu.cli import nodes as nodes_cli
from danlu.cli import waiting
from danlu.client import Client
from danlu.config import load_client_settings

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "jobs"


def make_app() -> typer.Typer:
    app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
    jobs_cli.register(app)
    nodes_cli.register(app)
    try:  # the server engineer's `danlu up` / `danlu server`, when present
        from danlu.cli import server as server_cli
    except ImportError:
        pass
    else:
        server_cli.register(app)
    return app


APP = make_app()


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    api = FakeApi()
    seen: list[tuple[Path | None, str | None, str | None]] = []

    def factory(home: Path | None, url: str | None, token: str | None) -> Client:
        seen.append((home, url, token))
        return Client("http://fake", TOKEN, transport=api.transport())

    monkeypatch.setattr(jobs_cli, "client_factory", factory)
    monkeypatch.setattr(jobs_cli, "console", Console(width=200))
    api.factory_calls = seen  # type: ignore[attr-defined]
    return api


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(APP, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def write(tmp_path: Path, text: str, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


HELLO = """\
name: hello
command: [python, -c, "print('hello')"]
resources: {gpus: 1, gpu_memory: 20GiB}
priority: 0
"""


def test_submit_validates_locally_and_sends_the_spec(fake: FakeApi, tmp_path: Path) -> None:
    code, out, _ = run("submit", str(write(tmp_path, HELLO)))
    assert code == 0, out
    assert "submitted job" in out and "hello" in out and "PENDING" in out
    sent = json.loads(fake.requests[-1].content)
    assert sent["command"] == ["python", "-c", "print('hello')"]
    assert sent["resources"]["gpu_memory"] == 20 * GiB


def test_submit_overrides(fake: FakeApi, tmp_path: Path) -> None:
    path = write(tmp_path, HELLO)
    code, out, _ = run(
        "submit",
        str(path),
        "--name",
        "renamed",
        "--priority",
        "7",
        "--gpus",
        "2",
        "--gpu-memory",
        "10GiB",
        "--set",
        "env.SEED=3",
        "--set",
        "max_restarts=0",
        "--json",
    )
    assert code == 0, out
    sent = json.loads(fake.requests[-1].content)
    assert sent["name"] == "renamed"
    assert sent["priority"] == 7
    assert sent["resources"]["gpus"] == {"min": 2, "max": 2}
    assert sent["resources"]["gpu_memory"] == 10 * GiB
    assert sent["env"] == {"SEED": "3"}
    assert sent["max_restarts"] == 0
    assert json.loads(out)["name"] == "renamed"


def test_submit_after_adds_to_the_specs_dependencies(fake: FakeApi, tmp_path: Path) -> None:
    for listed, kept in (
        ("", []),
        ("depends_on: abcd\n", [{"job": "abcd"}]),
        (
            "depends_on: {job: abcd, condition: started}\n",
            [{"job": "abcd", "condition": "started"}],
        ),
    ):
        path = write(tmp_path, HELLO + listed)
        code, out, _ = run("submit", str(path), "--after", "0123ab", "--after", "ffff:failed")
        assert code == 0, out
        sent = json.loads(fake.requests[-1].content)["depends_on"]
        assert sent == [*kept, {"job": "0123ab"}, {"job": "ffff", "condition": "failed"}]
    code, _, err = run("submit", str(write(tmp_path, HELLO)), "--after", "ffff:later")
    # the flag and its value named, then the spec's words for the condition refused
    assert code == 2 and err.startswith("error: --after 'ffff:later': "), err
    assert "later" in err.split(": ", 2)[2], err


def test_wait_exits_0_when_all_succeeded_1_when_one_did_not(fake: FakeApi) -> None:
    good = fake.add_job("good", "RUNNING")
    bad = fake.add_job("bad", "RUNNING", exit_code=3)
    # each id is looked up once (a job, not a sweep) before the polls
    fake.progress = {
        good["id"]: ["RUNNING", "RUNNING", "SUCCEEDED"],
        bad["id"]: ["RUNNING", "FAILED"],
    }
    code, out, _ = run("wait", good["id"], bad["id"], "--poll", "0.1")
    assert code == 1, out
    lines = out.splitlines()  # each as it ends: the failed one first
    assert lines == [
        f"job {bad['id']} (bad): FAILED (exit 3)",
        f"job {good['id']} (good): SUCCEEDED",
    ]
    code, out, _ = run("wait", good["id"], "--json")
    assert code == 0 and [j["id"] for j in json.loads(out)] == [good["id"]]


def test_wait_gives_up_at_its_timeout_with_status_124(fake: FakeApi) -> None:
    done = fake.add_job("done", "SUCCEEDED")
    stuck = fake.add_job("stuck", "PENDING")
    code, out, err = run("wait", done["id"], stuck["id"], "--timeout", "0.3", "--poll", "0.1")
    assert code == 124
    assert f"1 job(s) not finished after 0.3s: {stuck['id']}" in err.replace("\n", "")
    assert f"job {done['id']} (done): SUCCEEDED" in out
    code, _, err = run("wait", stuck["id"], "--timeout", "soon")
    assert code == 2 and "--timeout: 'soon' is not a duration" in err
    code, _, err = run("wait", "nope")
    assert code == 2 and "no job, sweep or job array 'nope'" in err


def test_submit_wait_submits_then_waits_for_the_end(fake: FakeApi, tmp_path: Path) -> None:
    fake.submitted_progress = ["PENDING", "RUNNING", "SUCCEEDED"]
    code, out, _ = run("submit", str(write(tmp_path, HELLO)), "--wait")
    assert code == 0, out
    first, last = out.splitlines()
    assert first.startswith("submitted job ") and first.endswith("(hello): PENDING")
    assert last.endswith("(hello): SUCCEEDED")
    fake.submitted_progress = ["CANCELLED"]
    code, out, _ = run("submit", str(write(tmp_path, HELLO)), "--wait", "--json")
    assert code == 1 and [j["state"] for j in json.loads(out)] == ["CANCELLED"]


def test_submit_wait_interrupted_names_the_job_that_goes_on(
    fake: FakeApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C during ``submit --wait --json`` exited 130 with nothing printed: the job ran
    on and its id was nowhere. Now stderr names it (stdout stays empty, as JSON would come
    only at the end)."""
    fake.submitted_progress = ["PENDING", "RUNNING"]

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Client, "wait", interrupted)
    code, out, err = run("submit", str(write(tmp_path, HELLO)), "--wait", "--json")
    job_id = list(fake.jobs)[-1]
    assert code == 130 and out == ""
    assert f"interrupted: job {job_id} goes on (danlu wait {job_id}; danlu cancel {job_id})" in (
        " ".join(err.split())
    )
    code, out, err = run("submit", str(write(tmp_path, HELLO)), "--wait")
    assert code == 130 and "submitted job" in out and "goes on" in err


@pytest.mark.parametrize("job_id", ["[/]x", "[bold]j1\x1b[2J"])
def test_submit_wait_interrupted_shows_the_servers_id_as_text(
    fake: FakeApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, job_id: str
) -> None:
    """The id the server gave, quoted in the line that names the job going on, is text:
    ``[/x]`` made Rich fail with a MarkupError, ``[bold]`` vanished and an escape sequence
    reached the terminal."""

    def submitted(self: Client, body: dict[str, object]) -> dict[str, object]:
        return {"id": job_id, "name": "hello", "state": "PENDING"}

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Client, "submit", submitted)
    monkeypatch.setattr(waiting, "wait_jobs", interrupted)  # Ctrl-C while waiting
    code, out, err = run("submit", str(write(tmp_path, HELLO)), "--wait", "--json")
    assert code == 130 and out == "", err
    shown = job_id.replace("\x1b", "\\x1b")
    assert f"interrupted: job {shown} goes on (danlu wait {shown}; danlu cancel {shown})" in (
        " ".join(err.split())
    )
    assert "\x1b" not in err


def test_submit_time_limit_takes_a_duration(fake: FakeApi, tmp_path: Path) -> None:
    for given, seconds in (("5400", 5400.0), ("90m", 5400.0), ("01:30:00", 5400.0)):
        code, out, _ = run("submit", str(write(tmp_path, HELLO)), "--time-limit", given)
        assert code == 0, out
        assert json.loads(fake.requests[-1].content)["time_limit"] == seconds
    code, _, err = run("submit", str(write(tmp_path, HELLO)), "--time-limit", "soon")
    assert code == 2 and "--time-limit: 'soon' is not a duration" in err  # named by its flag


@pytest.mark.parametrize(
    "text,field",
    [
        ("name: x\ncommand: python train.py\n", "command"),
        ("name: x\ncommand: [a]\nresources: {gpus: -1}\n", "resources.gpus"),
        ("name: x\ncommand: [a]\nresources: {gpu_memory: lots}\n", "resources.gpu_memory"),
        ("name: x\ncommand: [a]\npriorty: 1\n", "priorty"),
        ("command: [a]\n", "name"),
    ],
)
def test_submit_rejects_invalid_specs_locally_naming_the_field(
    fake: FakeApi, tmp_path: Path, text: str, field: str
) -> None:
    code, _, err = run("submit", str(write(tmp_path, text)))
    assert code == 2
    assert f"{field}:" in err
    assert fake.requests == []  # never sent


def test_submit_bad_file_and_bad_set(fake: FakeApi, tmp_path: Path) -> None:
    code, _, err = run("submit", str(tmp_path / "missing.yaml"))
    assert code == 2 and "cannot read job spec" in err
    code, _, err = run("submit", str(write(tmp_path, "- a\n- b\n")))
    assert code == 2 and "mapping" in err
    code, _, err = run("submit", str(write(tmp_path, HELLO)), "--set", "priority")
    assert code == 2 and "key=value" in err


def test_submit_shows_the_servers_admission_error(fake: FakeApi, tmp_path: Path) -> None:
    code, _, err = run("submit", str(write(tmp_path, HELLO)), "--gpus", "3")
    assert code == 2
    assert err == "error: --gpus: needs 3 GPUs; the largest node has 2\n"  # the flag it gave
    code, _, err = run("submit", str(write(tmp_path, HELLO.replace("gpus: 1", "gpus: 3"))))
    assert err == "error: resources.gpus: needs 3 GPUs; the largest node has 2\n"  # the file's


def test_ls_json_lists_jobs_with_the_required_fields(fake: FakeApi) -> None:
    fake.add_job("a", "RUNNING")
    fake.add_job("b", "SUCCEEDED")
    fake.add_job("c", "PENDING")
    code, out, _ = run("ls", "--json")
    assert code == 0
    jobs = json.loads(out)
    assert [j["name"] for j in jobs] == ["c", "b", "a"]
    for job in jobs:
        assert {"id", "name", "state", "restarts"} <= set(job)
    code, out, _ = run("ls", "--json", "--state", "running,pending")
    assert [j["name"] for j in json.loads(out)] == ["c", "a"]
    code, out, _ = run("ls", "--json", "--all", "-s", "SUCCEEDED")
    assert [j["name"] for j in json.loads(out)] == ["b"]


def test_ls_table_and_bad_state(fake: FakeApi) -> None:
    code, out, _ = run("ls")
    assert code == 0 and "no jobs" in out
    fake.add_job(
        "train-a",
        "RUNNING",
        allocation=[{"node": "n0", "gpu": 1, "milli": 1000, "memory": 20 * GiB}],
    )
    code, out, _ = run("ls")
    assert code == 0 and "train-a" in out and "RUNNING" in out and "n0:1" in out
    code, _, err = run("ls", "--state", "DONE")
    assert code == 2 and "'DONE' is not a job state" in err


def test_show_json_and_table(fake: FakeApi) -> None:
    job = fake.add_job("shown", "PENDING")
    code, out, _ = run("show", job["id"][:11], "--json")
    assert code == 0
    data = json.loads(out)
    assert data["id"] == job["id"] and data["events"][0]["new"] == "PENDING"
    code, out, _ = run("show", job["id"])
    assert code == 0 and "shown" in out and "waiting for 1 GPU" in out and "submitted" in out
    assert "deadline_at" not in out
    due = fake.add_job("due", "PENDING", deadline_at=4000.0)
    code, out, _ = run("show", due["id"])
    assert code == 0 and "deadline_at" in out and "purged_at" not in out
    old = fake.add_job("old", "SUCCEEDED", purged_at=5000.0)
    code, out, _ = run("show", old["id"])
    assert code == 0 and "purged_at" in out and "time_limit" not in out
    limited = fake.add_job("limited", "RUNNING", time_limit=7200.0, run_time=1830.0)
    code, out, _ = run("show", limited["id"])
    assert code == 0 and "2h (30m30s used by runs ended)" in out


def test_unknown_job_exits_2_with_the_servers_message(fake: FakeApi) -> None:
    for cmd in ("show", "logs", "cancel", "why"):
        code, _, err = run(cmd, "nope")
        assert code == 2, cmd
        assert "id: job 'nope' not found" in err


def test_logs_and_follow(fake: FakeApi) -> None:
    job = fake.add_job("talky", "SUCCEEDED")
    fake.logs[job["id"]] = b"hello\nworld\n"
    code, out, _ = run("logs", job["id"])
    assert code == 0 and out == "hello\nworld\n"
    code, out, _ = run("logs", "-f", job["id"])
    assert code == 0 and out == "hello\nworld\n"
    assert any(r.url.params.get("follow") == "true" for r in fake.requests)


def test_cancel_and_conflict(fake: FakeApi) -> None:
    job = fake.add_job("victim", "RUNNING")
    code, out, _ = run("cancel", job["id"])
    assert code == 0 and "CANCELLED" in out
    code, _, err = run("cancel", job["id"])
    assert code == 2 and "state: job" in err and "already CANCELLED" in err


def test_why(fake: FakeApi) -> None:
    job = fake.add_job("waiting", "PENDING", pending_reason="needs 2 GPUs, 1 free")
    code, out, _ = run("why", job["id"])
    assert code == 0 and "PENDING: needs 2 GPUs, 1 free" in out
    code, out, _ = run("why", job["id"], "--json")
    assert json.loads(out)["reason"] == "needs 2 GPUs, 1 free"


def test_nodes_and_top_once(fake: FakeApi) -> None:
    fake.add_job(
        "j1", "RUNNING", allocation=[{"node": "node-0", "gpu": 0, "milli": 500, "memory": 30 * GiB}]
    )
    fake.add_job("j2", "PENDING")
    code, out, _ = run("nodes", "--json")
    assert code == 0
    nodes = json.loads(out)
    assert nodes[0]["gpus"][0]["allocated_memory"] == 30 * GiB
    code, out, _ = run("nodes")
    assert code == 0 and "node-0" in out and "30.0GiB/80.0GiB" in out
    code, out, _ = run("top", "--once")
    assert code == 0
    assert "2 GPU(s)" in out and "RUNNING 1" in out and "PENDING 1" in out
    assert "j1" in out and "j2" in out
    code, _, err = run("top", "--interval", "inf")  # time.sleep(inf) was an OverflowError
    assert code == 2 and "--interval" in err


def test_flags_reach_the_client_factory(fake: FakeApi, tmp_path: Path) -> None:
    run("ls", "--home", str(tmp_path), "--url", "http://x:1", "--token", "t")
    assert fake.factory_calls[-1] == (tmp_path, "http://x:1", "t")  # type: ignore[attr-defined]


def test_no_server_at_home_exits_2_with_the_hint(tmp_path: Path) -> None:
    for cmd in (["ls"], ["nodes"], ["top", "--once"], ["show", "x"]):
        code, _, err = run(*cmd, "--home", str(tmp_path))
        assert code == 2
        assert f"no danlu server found at {tmp_path}" in err
        assert "danlu up --home" in err


def test_unreachable_server_exits_2(tmp_path: Path) -> None:
    code, _, err = run("ls", "--url", "http://127.0.0.1:9", "--token", "t")
    assert code == 2 and "cannot reach the danlu server" in err


def test_client_settings_flags_win_over_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DANLU_HOME", str(tmp_path / "env-home"))
    monkeypatch.setenv("DANLU_URL", "http://env:1")
    monkeypatch.setenv("DANLU_TOKEN", "env-token")
    s = load_client_settings()
    assert (s.home, s.url, s.token) == (tmp_path / "env-home", "http://env:1", "env-token")
    s = load_client_settings(tmp_path, "http://flag:2", "flag-token")
    assert (s.home, s.url, s.token) == (tmp_path, "http://flag:2", "flag-token")
    monkeypatch.delenv("DANLU_HOME")
    monkeypatch.delenv("DANLU_URL")
    monkeypatch.delenv("DANLU_TOKEN")
    s = load_client_settings()
    assert s.home == Path("~/.danlu").expanduser() and s.url is None and s.token is None


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_example_jobs_are_valid_specs(fake: FakeApi, path: Path) -> None:
    code, out, err = run("submit", str(path), "--json")
    assert code == 0, err
    assert json.loads(out)["state"] == "PENDING"
