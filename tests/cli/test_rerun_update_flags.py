"""``danlu rerun JOB`` takes ``danlu submit``'s overrides (and ``--env``, ``--max-restarts``)
for the new job, which the server validates as a submission (a refusal named by the flag);
``danlu update JOB`` changes a queued job's resources, time limit, deadline and max restarts,
and a running job's time limit and deadline, not only its priority; ``danlu sweep ls``
left-aligns its text columns and right-aligns its numbers, as ``danlu ls`` does."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_fake_api import invoke, serve_jobs_commands
from cli_real_api import real_api
from test_sweep_metric_unreported import SWEEP_ID, _app, _sweep
from typer.testing import CliRunner

from danlu.cli.main import app
from danlu.config import load_settings
from danlu.core.state import JobState
from danlu.core.units import GiB
from danlu.server.db import Database
from danlu.server.services import jobs

SPEC = """\
name: train
command: [python, train.py]
time_limit: 1h
env: {SEED: "1", MODE: fast}
"""


@pytest.fixture
def spec_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The real API app (no loops: a job stays PENDING; one 80 GiB GPU); yields a spec."""
    with real_api(tmp_path, monkeypatch):
        spec = tmp_path / "job.yaml"
        spec.write_text(SPEC)
        yield spec


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def _submitted(spec: Path) -> str:
    code, out, err = _run("submit", str(spec), "--json")
    assert code == 0, out + err
    return str(json.loads(out)["id"])


def test_rerun_takes_the_submit_overrides(spec_file: Path) -> None:
    first = _submitted(spec_file)
    assert _run("cancel", first)[0] == 0
    code, out, err = _run("rerun", first, "--gpus", "2")
    assert code == 2 and "--gpus: asks for 2 GPUs; the cluster has 1" in err, out + err
    code, out, err = _run("rerun", first, "--time-limit", "soon")
    assert code == 2 and "--time-limit: " in err, out + err
    flags = ["--gpu-memory", "20GiB", "--time-limit", "2h", "--priority", "4"]
    flags += ["--env", "SEED=2", "--max-restarts", "0", "--set", "preemptible=false"]
    code, out, err = _run("rerun", first, *flags, "--json")
    assert code == 0, out + err
    spec = json.loads(out)["spec"]
    assert spec["resources"]["gpu_memory"] == 20 * GiB
    assert (spec["time_limit"], spec["priority"], spec["max_restarts"]) == (7200, 4, 0)
    assert spec["env"] == {"SEED": "2", "MODE": "fast"} and spec["preemptible"] is False


def test_update_changes_a_queued_jobs_resources_and_limits(spec_file: Path) -> None:
    job = _submitted(spec_file)
    flags = ["--time-limit", "2h", "--gpu-memory", "20GiB", "--max-restarts", "1"]
    code, out, err = _run("update", job, *flags, "--deadline", "1d")
    assert code == 0, out + err
    assert out.split("\n")[0] == (
        f"job {job}: time_limit 2h, deadline 1d after its submission, max_restarts 1, "
        "gpus 1 x 20.0GiB"
    )
    code, out, err = _run("update", job, "--deadline", "later")
    assert code == 2 and "--deadline: " in err, out + err
    code, out, err = _run("show", job)
    assert "changed by admin: time_limit 1h -> 2h; deadline none -> 1d" in out, out + err


def test_update_of_a_running_job_refuses_what_needs_a_queued_one(
    spec_file: Path, tmp_path: Path
) -> None:
    job = _submitted(spec_file)
    db = Database(load_settings(home=tmp_path).db_url)
    share = [{"node": "fake-0", "gpu": 0, "milli": 1000, "memory": 80 * GiB}]
    with db.session() as s:
        jobs.change_state(s, jobs.get_job(s, job), JobState.RUNNING, "test", allocation=share)
    db.dispose()
    code, out, err = _run("update", job, "--gpus", "1", "--time-limit", "3h")
    assert code == 2 and "only while it is PENDING" in err and "resources" in err, out + err
    code, out, err = _run("update", job, "--time-limit", "3h", "-p", "2")
    assert (code, out.strip()) == (0, f"job {job}: priority 2, time_limit 3h"), out + err


def test_sweep_ls_aligns_text_left_and_numbers_right(monkeypatch: pytest.MonkeyPatch) -> None:
    api = serve_jobs_commands(monkeypatch)
    _sweep(api, "accuracy", [])
    api.sweeps["other"] = {**api.sweeps[SWEEP_ID], "id": "other", "name": "x", "state": "FAILED"}
    code, out, err = invoke(_app(), "sweep", "ls")
    assert code == 0, out + err
    lines = out.splitlines()
    header = next(line for line in lines if "NAME" in line)
    (row,) = [line for line in lines if "│ other" in line]
    titles = [cell.strip() for cell in header.strip().strip("┃").split("┃")]
    cells = dict(zip(titles, row.strip().strip("│").split("│"), strict=True))
    for text in ("NAME", "USER", "STATE", "METRIC"):  # one blank of padding, then the text
        assert cells[text].startswith(" ") and cells[text][1] != " ", (text, row)
    assert cells["TRIALS"].endswith(" 0/0 ") and cells["TRIALS"].startswith("  "), row
