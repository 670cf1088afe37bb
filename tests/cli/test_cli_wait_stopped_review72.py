"""``danlu wait SWEEP`` exited 1 for a DONE sweep whose early-stopping rule had stopped a
trial, while ``--after SWEEP`` counts such a sweep as succeeded: a trial marked
``stopped_early`` by ``GET /sweeps/{id}`` now counts as succeeded when its sweep is DONE
(through the in-memory API of ``cli_fake_api``)."""

from __future__ import annotations

import pytest
from cli_fake_api import FakeApi, invoke, jobs_app, serve_jobs_commands

APP = jobs_app()
SWEEP = "5a7e0c9d1b2f"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    return serve_jobs_commands(monkeypatch)  # answers GET /sweeps/{id} by the full id


def add_sweep(fake: FakeApi, state: str, second: str, stopped_early: bool) -> None:
    """A sweep ``lr`` in ``state``: trial 0 SUCCEEDED, trial 1 ended ``second``."""
    jobs = [fake.add_job("lr-0", "SUCCEEDED"), fake.add_job("lr-1", second)]
    fake.sweeps[SWEEP] = {
        "id": SWEEP,
        "name": "lr",
        "user": "admin",
        "array": False,
        "state": state,
        "reason": "",
        "metric": "loss",
        "goal": "minimize",
        "total": 2,
        "submitted": 2,
        "created_at": 1000.0,
        "finished_at": 1100.0,
        "spec": {"parallel": 2},
        "trials": [
            {
                "job_id": job["id"],
                "trial": n,
                "state": job["state"],
                "parameters": {"lr": 0.1 / 10**n},
                "best": 0.5,
                "step": 20,
                "stopped_early": stopped_early and n == 1,
            }
            for n, job in enumerate(jobs)
        ],
        "best": None,
    }


@pytest.mark.parametrize(
    ("state", "second", "stopped_early", "code"),
    [
        ("DONE", "CANCELLED", True, 0),  # the rule stopped it: the sweep did as meant
        ("DONE", "CANCELLED", False, 1),  # a user cancelled it
        ("DONE", "FAILED", False, 1),
        ("DONE", "SUCCEEDED", False, 0),
        ("CANCELLED", "CANCELLED", True, 1),  # the sweep itself did not end DONE
    ],
    ids=["stopped-early", "user-cancel", "failed", "all-succeeded", "sweep-cancelled"],
)
def test_wait_judges_a_sweep_as_after_does(
    fake: FakeApi, state: str, second: str, stopped_early: bool, code: int
) -> None:
    add_sweep(fake, state, second, stopped_early)
    exit_code, out, err = invoke(APP, "wait", SWEEP, "--poll", "0.1", "--timeout", "30")
    assert exit_code == code, (out, err)
    assert f"(lr-1): {second}" in out, out
    meant = stopped_early and state == "DONE"
    assert ("(lr-1): CANCELLED (stopped early)" in out) == meant, out


def test_sweep_show_says_which_trials_were_stopped_early(fake: FakeApi) -> None:
    from danlu.cli import sweep as sweep_cli

    app = jobs_app()
    sweep_cli.register(app)
    add_sweep(fake, "DONE", "CANCELLED", True)
    code, out, err = invoke(app, "sweep", "show", SWEEP)
    assert code == 0, (out, err)
    assert out.count("CANCELLED (stopped early)") == 1, out
