"""The CLI at the edges of its inputs, through Typer's CliRunner against the in-memory API of
``cli_fake_api`` (an httpx.MockTransport): whole logs past one server chunk, error texts
that look like Rich markup, job arrays that ended without succeeding, empty token prefixes,
timeouts, ``show``'s recent events, ``top`` past the newest 1000 jobs, sim outputs that
name an input, and ``--follow`` with ``--json``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from cli_fake_api import TOKEN, FakeApi, serve_commands
from rich.console import Console
from typer.testing import CliRunner

from danlu.cli import admin as admin_cli
from danlu.cli import events as events_cli
from danlu.cli import jobs as jobs_cli
from danlu.cli import metrics as metrics_cli
from danlu.cli import nodes as nodes_cli
from danlu.cli import sim as sim_cli
from danlu.cli import top as top_view
from danlu.client import Client

APP = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
for module in (jobs_cli, nodes_cli, admin_cli, events_cli, metrics_cli, sim_cli):
    module.register(APP)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    api = serve_commands(monkeypatch)
    monkeypatch.setattr(jobs_cli, "console", Console(width=200))
    return api


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(APP, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


# -- 1. logs past the server's chunk ------------------------------------------------------------


def test_logs_prints_the_whole_log_past_one_chunk(fake: FakeApi) -> None:
    job = fake.add_job("talky", "SUCCEEDED")
    text = "".join(f"line {i} é\n" for i in range(50))
    fake.logs[job["id"]] = text.encode()
    fake.log_chunk = 7  # a chunk ends inside a two-byte character now and then
    code, out, _ = run("logs", job["id"])
    assert code == 0 and out == text


# -- 2. error texts are not Rich markup -----------------------------------------------------------


def test_error_texts_with_brackets_are_printed_as_they_are(
    fake: FakeApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run("ls", "--state", "[/x]")
    assert code == 2 and "'[/x]' is not a job state" in err
    code, _, err = run("submit", "run[/1].yaml")
    assert code == 2 and "run[/1].yaml" in err
    code, _, err = run("sim", "run", "--workload", "w[/x].csv", "--quiet")
    assert code == 2 and "w[/x].csv" in err


# -- 3. a job array that ended without succeeding -----------------------------------------------


def _array(fake: FakeApi, state: str, submitted: int, total: int) -> str:
    task = fake.add_job("task", "SUCCEEDED")
    fake.sweeps["arr0000001"] = {
        "id": "arr0000001",
        "name": "task",
        "array": "0-3%1",
        "state": state,
        "reason": "trial 1 could not be submitted: [not a member]" if state == "FAILED" else "",
        "total": total,
        "submitted": submitted,
        "trials": [{"job_id": task["id"]}],
    }
    return "arr0000001"


def test_wait_on_an_array_that_failed_exits_1(fake: FakeApi) -> None:
    array = _array(fake, "FAILED", 1, 4)
    code, out, err = run("wait", array, "--poll", "0.1")
    assert code == 1, out
    assert "array arr0000001 FAILED" in err and "[not a member]" in err
    assert "(1 of 4 submitted)" in err
    code, out, _ = run("wait", array, "--json", "--poll", "0.1")
    assert code == 1 and [j["state"] for j in json.loads(out)] == ["SUCCEEDED"]


def test_wait_on_an_array_cut_short_exits_1_and_a_whole_one_0(fake: FakeApi) -> None:
    array = _array(fake, "CANCELLED", 1, 4)
    assert run("wait", array, "--poll", "0.1")[0] == 1
    array = _array(fake, "DONE", 1, 1)
    code, _, err = run("wait", array, "--poll", "0.1")
    assert code == 0 and err == ""


def test_wait_json_on_an_array_past_its_timeout_prints_json(fake: FakeApi) -> None:
    """A plain job's timeout printed ``[]`` on stdout, an array's nothing at all."""
    array = _array(fake, "RUNNING", 1, 4)
    code, out, err = run("wait", array, "--json", "--timeout", "0.3", "--poll", "0.1")
    assert code == 124 and json.loads(out) == [] and "not finished" in err


def test_project_members_none_is_refused_not_read_as_all(fake: FakeApi) -> None:
    """``--members none`` opened the project to every user (an empty list means all)."""
    for value in ("none", "None", " , "):
        for command in (["project", "set", "p1"], ["project", "add", "p1"]):
            code, _, err = run(*command, "--members", value)
            assert code == 2 and "--members" in err and "'all'" in err, err
    assert not any(r.method in ("POST", "PATCH") for r in fake.requests)


# -- 4. an empty token prefix -------------------------------------------------------------------


def test_revoke_refuses_an_empty_prefix(fake: FakeApi) -> None:
    for prefix in ("", "  "):
        code, _, err = run("user", "revoke", "bob", prefix)
        assert code == 2 and "PREFIX is empty" in err
    assert not any(r.method == "DELETE" for r in fake.requests)


# -- 5. / 6. numbers out of range -----------------------------------------------------------------


@pytest.mark.parametrize("load", ["inf", "nan", "0", "-1"])
def test_sim_pack_refuses_a_load_that_is_not_finite_and_positive(tmp_path: Path, load: str) -> None:
    pods, nodes = tmp_path / "pods.csv", tmp_path / "nodes.csv"
    code, _, err = run("sim", "pack", "--pods", str(pods), "--nodes", str(nodes), "--load", load)
    assert code == 2 and "--load must be a finite number above 0" in err


@pytest.mark.parametrize("timeout", ["nan", "-5", "inf"])
def test_wait_and_drain_refuse_a_timeout_out_of_range(fake: FakeApi, timeout: str) -> None:
    job = fake.add_job("sleepy", "RUNNING")
    code, _, err = run("wait", job["id"], "--timeout", timeout)
    assert code == 2 and "--timeout" in err and "finite duration of 0 or more" in err
    code, _, err = run("drain", "node-0", "--wait", "--timeout", timeout)
    assert code == 2 and "--timeout" in err and "finite duration of 0 or more" in err
    assert not any(r.url.path.endswith("/cordon") for r in fake.requests)


def test_wait_takes_a_zero_timeout(fake: FakeApi) -> None:
    job = fake.add_job("done", "SUCCEEDED")
    assert run("wait", job["id"], "--timeout", "0")[0] == 0


# -- 7. sim outputs that name an input ----------------------------------------------------------


def test_sim_refuses_an_output_that_is_an_input_or_another_output(tmp_path: Path) -> None:
    workload = tmp_path / "wl.csv"
    workload.write_text("kept\n")
    code, _, err = run("sim", "run", "--workload", str(workload), "--json", str(workload))
    assert code == 2 and "--json" in err and "--workload" in err
    alias = tmp_path / "sub" / ".." / "wl.csv"
    (tmp_path / "sub").mkdir()
    code, _, err = run("sim", "compare", "--workload", str(workload), "--json", str(alias))
    assert code == 2 and "is the file of --workload" in err
    code, _, err = run(
        "sim",
        "plan",
        "--target",
        "avg_jct<=2h",
        "--workload",
        str(workload),
        "--json",
        str(workload),
    )
    assert code == 2 and "is the file of --workload" in err
    out = tmp_path / "out.json"
    code, _, err = run("sim", "run", "--json", str(out), "--plot", str(out), "--quiet")
    assert code == 2 and "--plot" in err and "is the file of --json" in err
    pods, nodes = tmp_path / "pods.csv", tmp_path / "nodes.csv"
    pods.write_text("kept\n")
    code, _, err = run(
        "sim", "pack", "--pods", str(pods), "--nodes", str(nodes), "--json", str(pods)
    )
    assert code == 2 and "is the file of --pods" in err
    assert workload.read_text() == "kept\n" and pods.read_text() == "kept\n"


# -- 9. show's recent events ----------------------------------------------------------------------


def test_show_holds_the_most_recent_events(fake: FakeApi) -> None:
    job = fake.add_job("cycler", "RUNNING")
    fake.events[job["id"]] = [
        {
            "id": i,
            "job_id": job["id"],
            "time": 1000.0 + i,
            "old": "PENDING",
            "new": "RUNNING",
            "reason": f"cycle {i}",
        }
        for i in range(1, 1251)
    ]
    code, out, _ = run("show", job["id"], "--json")
    events = json.loads(out)["events"]
    assert code == 0 and len(events) == 100
    assert [e["id"] for e in events] == list(range(1151, 1251))
    code, out, _ = run("show", job["id"])
    assert code == 0 and "cycle 1250" in out and "cycle 100 " not in out


# -- 10. top past the newest 1000 jobs -------------------------------------------------------------


def test_top_counts_running_jobs_older_than_the_newest_1000(fake: FakeApi) -> None:
    old = fake.add_job("old-runner", "RUNNING")
    for i in range(1000):
        fake.add_job(f"later-{i}", "SUCCEEDED")
    client = Client("http://fake", TOKEN, transport=fake.transport())
    console = Console(width=200, record=True)
    console.print(top_view.frame(client, width=200))
    text = console.export_text()
    assert "RUNNING 1" in text and "SUCCEEDED 1000" in text
    assert "active jobs (1)" in text and old["id"][:8] in text


# -- 13. --follow with --json -------------------------------------------------------------------


def test_follow_with_json_is_refused(fake: FakeApi) -> None:
    job = fake.add_job("training", "RUNNING")
    for args in (("events", "-f", "--json"), ("metrics", job["id"], "--follow", "--json")):
        code, _, err = run(*args)
        assert code == 2 and "--follow and --json cannot be combined" in err
    assert fake.requests == []
