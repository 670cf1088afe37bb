"""GPU energy charged to jobs: each interval's energy of a GPU goes to the jobs holding it,
by their share of it, into the job's total and its stretch's row; the usage report counts
it by period; the API, the CLI and ``/metrics`` show it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest
from helpers import live_server, spec, user_and_nodes, wait_state
from sqlalchemy.orm import Session

from danlu.core.cluster import Node, gpu_type
from danlu.core.state import JobState
from danlu.core.units import GiB
from danlu.devices.inventory import GpuKey
from danlu.server.db import Database, Job, JobEnergy
from danlu.server.energy import EnergyLoop
from danlu.server.services import energy, jobs, usage

T = 1_000_000.0
NODE = Node("a", 4, gpu_type("H100"))


def _share(gpu: int, milli: int = 1000) -> dict[str, object]:
    return {"node": "a", "gpu": gpu, "milli": milli, "memory": 80 * GiB * milli // 1000}


class ScriptedMeter:
    """A meter whose GPUs use ``watts`` each, whatever their load (the test's numbers)."""

    def __init__(self, watts: Mapping[GpuKey, float]) -> None:
        self.watts = dict(watts)
        self.totals: dict[GpuKey, float] = dict.fromkeys(watts, 0.0)
        self.last: float | None = None
        self.loads: list[dict[GpuKey, int]] = []
        self.closed = False

    def read(self, t: float, busy: Mapping[GpuKey, int]) -> dict[GpuKey, float]:
        self.loads.append(dict(busy))
        if self.last is not None:
            for key, power in self.watts.items():
                self.totals[key] += power * (t - self.last)
        self.last = t
        return dict(self.totals)

    def close(self) -> None:
        self.closed = True


def _start(s: Session, job: Job, t: float, allocation: list[dict[str, object]]) -> None:
    """Start ``job`` on ``allocation`` at ``t`` and record its launch, as the reconcile loop
    does once the executor took it (a run not launched yet is charged nothing)."""
    jobs.change_state(s, job, JobState.RUNNING, "go", t, allocation=allocation)
    job.launched_attempt = job.attempt


def _running(db: Database) -> tuple[str, str, str]:
    """Three running jobs on node a: ``whole`` on GPUs 0-1, ``half`` and ``quarter`` sharing
    GPU 2 (500 and 250 milli); GPU 3 idle. ``quarter`` started 5 s after the others."""
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), T)
        body = {"command": ["python", "train.py"]}
        whole = jobs.submit(s, {"name": "whole", "resources": {"gpus": 2}, **body}, alice, now=T)
        half = jobs.submit(s, {"name": "half", **body}, alice, now=T)
        quarter = jobs.submit(s, {"name": "quarter", **body}, alice, now=T)
        _start(s, whole, T, [_share(0), _share(1)])
        _start(s, half, T, [_share(2, 500)])
        _start(s, quarter, T + 5, [_share(2, 250)])
        return whole.id, half.id, quarter.id


def test_each_job_is_charged_its_share_of_its_gpus_energy(db: Database) -> None:
    whole, half, quarter = _running(db)
    meter = ScriptedMeter({("a", 0): 300.0, ("a", 1): 100.0, ("a", 2): 200.0, ("a", 3): 50.0})
    loop = EnergyLoop(db, meter)
    assert loop.run_once(T) == 0  # the first reading: charging starts here
    with db.read_session() as s:
        version = jobs.get_job(s, whole).version
    assert loop.run_once(T + 10) == 3
    assert meter.loads[-1] == {("a", 0): 1000, ("a", 1): 1000, ("a", 2): 750}
    with db.read_session() as s:
        got = {j: jobs.get_job(s, j).energy for j in (whole, half, quarter)}
        assert got[whole] == pytest.approx(3000.0 + 1000.0)
        assert got[half] == pytest.approx(2000.0 * 0.5)
        # a quarter of GPU 2, for the 5 s of the 10 it held it
        assert got[quarter] == pytest.approx(2000.0 * 0.25 * 0.5)
        assert jobs.get_job(s, whole).version == version  # no conflict with the reconcile loop
        rows = {r.job_id: (r.run_start, r.updated_at, r.joules) for r in s.query(JobEnergy)}
        assert rows[whole] == (T, T + 10, pytest.approx(4000.0))
        assert rows[quarter] == (T + 5, T + 10, pytest.approx(250.0))
    loop.run_once(T + 20)
    with db.read_session() as s:
        assert jobs.get_job(s, quarter).energy == pytest.approx(250.0 + 500.0)
        assert s.query(JobEnergy).count() == 3  # one row a stretch, added to


def test_a_new_stretch_gets_its_own_row_and_an_ended_one_is_not_charged(db: Database) -> None:
    whole, half, _ = _running(db)
    meter = ScriptedMeter({("a", g): 100.0 for g in range(4)})
    loop = EnergyLoop(db, meter)
    loop.run_once(T)
    loop.run_once(T + 10)
    with db.session() as s:  # whole is preempted and starts again on GPU 3; half finishes
        job = jobs.get_job(s, whole)
        jobs.change_state(s, job, JobState.PREEMPTING, "make room", T + 12)
        jobs.change_state(s, job, JobState.PENDING, "checkpointed", T + 14)
        _start(s, job, T + 16, [_share(3)])
        jobs.change_state(s, jobs.get_job(s, half), JobState.SUCCEEDED, "done", T + 15)
    loop.run_once(T + 20)
    with db.read_session() as s:
        # 2,000 J in its first stretch, then 100 W for the 4 s of its second in the interval
        assert jobs.get_job(s, whole).energy == pytest.approx(2000.0 + 400.0)
        assert jobs.get_job(s, half).energy == pytest.approx(500.0)  # nothing after it ended
        stretches = sorted(
            (r.run_start, r.joules) for r in s.query(JobEnergy).filter_by(job_id=whole)
        )
        assert stretches == [(T, pytest.approx(2000.0)), (T + 16, pytest.approx(400.0))]


def test_a_holding_read_before_the_job_moved_charges_nothing(db: Database) -> None:
    whole, _, _ = _running(db)
    with db.read_session() as s:
        held = {h.job_id: h for h in energy.holdings(s)}
    with db.session() as s:
        job = jobs.get_job(s, whole)
        jobs.change_state(s, job, JobState.PREEMPTING, "make room", T + 5)
        jobs.change_state(s, job, JobState.PENDING, "checkpointed", T + 6)
    with db.session() as s:
        assert energy.charge(s, {held[whole]: 123.0}, T + 10) == 0
    with db.read_session() as s:
        assert jobs.get_job(s, whole).energy is None
        assert s.query(JobEnergy).count() == 0


def test_the_usage_report_counts_energy_by_period(db: Database) -> None:
    _running(db)
    meter = ScriptedMeter({("a", g): 360.0 for g in range(4)})
    loop = EnergyLoop(db, meter)
    for step in range(0, 101, 10):
        loop.run_once(T + step)
    with db.read_session() as s:
        (row,) = usage.usage(s, T, T + 100, now=T + 100)
        # 2 GPUs + 0.5 + 0.25 (from T + 5) of 360 W for 100 s
        assert row.energy == pytest.approx(360.0 * (2.5 * 100 + 0.25 * 95))
        (part,) = usage.usage(s, T + 50, T + 100, now=T + 100)
        assert part.energy == pytest.approx(360.0 * 2.75 * 50)
    with db.session() as s:  # a job no meter charged: no energy
        s.query(JobEnergy).delete()
    with db.read_session() as s:
        (row,) = usage.usage(s, T, T + 100, now=T + 100)
        assert row.energy is None and row.gpu_seconds > 0


def test_the_api_the_cli_and_metrics_show_energy(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from danlu.cli.main import app

    with (
        live_server(tmp_path, fake_gpus="2x80GiB", energy_interval=0.1) as live,
        live.client() as c,
    ):
        job = c.post("/jobs", json=spec("warm", "import time; time.sleep(1.5)")).json()
        wait_state(c, job["id"], "SUCCEEDED")
        got = c.get(f"/jobs/{job['id']}").json()
        # one fake GPU drawing 400 W while held: a few hundred joules
        assert 0.3 * 400 < got["energy_joules"] < 30 * 400
        (row,) = c.get("/usage").json()
        assert row["energy_kwh"] == pytest.approx(got["energy_joules"] / 3.6e6, rel=0.05)
        metrics = live.url + "/metrics"
        with live.client() as plain:
            text = plain.get(metrics).text
        assert 'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{Hostname="localhost"' in text
        flags = ["--url", live.url, "--token", live.token]
        result = CliRunner().invoke(app, ["usage", "--days", "1", *flags])
        assert result.exit_code == 0 and "kWh" in result.stdout
        result = CliRunner().invoke(app, ["show", job["id"], *flags])
        assert result.exit_code == 0 and "energy" in result.stdout and "Wh" in result.stdout


def test_no_meter_no_energy(tmp_path: Path) -> None:
    with live_server(tmp_path, fake_gpus="1x80GiB", energy_interval=0) as live, live.client() as c:
        job = c.post("/jobs", json=spec("cold", "pass")).json()
        wait_state(c, job["id"], "SUCCEEDED")
        assert c.get(f"/jobs/{job['id']}").json()["energy_joules"] is None
        (row,) = c.get("/usage").json()
        assert row["energy_kwh"] is None


def test_stopping_the_loop_releases_the_meter(db: Database) -> None:
    meter = ScriptedMeter({})
    loop = EnergyLoop(db, meter, interval=0.05)
    loop.start()
    loop.stop()
    assert meter.closed and meter.loads  # it read at least once


def test_jobs_on_gpus_no_meter_reads_are_left_alone(db: Database) -> None:
    whole, half, _ = _running(db)
    meter = ScriptedMeter({("a", 2): 100.0, ("b", 0): 100.0})  # not GPUs 0-1 of node a
    loop = EnergyLoop(db, meter)
    loop.run_once(T)
    assert loop.run_once(T + 10) == 2  # half and quarter, on GPU 2
    with db.read_session() as s:
        assert jobs.get_job(s, whole).energy is None
        assert jobs.get_job(s, half).energy == pytest.approx(500.0)
        assert s.query(JobEnergy).filter_by(job_id=whole).count() == 0


def test_jobs_without_gpus_are_not_charged(db: Database) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, (NODE,), T)
        jobs.submit(s, {"name": "q", "command": ["true"]}, alice, now=T)
    meter = ScriptedMeter({("a", 0): 100.0})
    loop = EnergyLoop(db, meter)
    loop.run_once(T)
    assert loop.run_once(T + 10) == 0
    with db.read_session() as s:
        assert s.query(Job).one().energy is None


def test_a_wall_clock_step_charges_no_power_for_the_jump(db: Database) -> None:
    """A meter that integrates power (no energy counter: fake GPUs, older ones) is read on
    the monotonic clock, and the interval charged is as long as that clock says: a wall
    clock stepped a day ahead between two readings charged the jobs a day of power (or,
    their run starts moved with the step as the reconcile loop moves them, a sliver of
    the interval), and one set back charged a part of what they used."""
    whole, _half, _quarter = _running(db)
    meter = ScriptedMeter({("a", 0): 100.0, ("a", 1): 100.0})
    ticks = iter([0.0, 10.0, 20.0])
    loop = EnergyLoop(db, meter, monotonic=lambda: next(ticks))
    loop.run_once(T)
    with db.session() as s:  # the wall clock steps a day ahead; the reconcile loop sees it
        jobs.shift_clocks(s, 86_400.0, T)
    loop.run_once(T + 86_400 + 10)
    with db.read_session() as s:
        assert jobs.get_job(s, whole).energy == pytest.approx(2 * 100.0 * 10)
    with db.session() as s:  # then 15 s back
        jobs.shift_clocks(s, -15.0, T + 86_400 + 10)
    loop.run_once(T + 86_400 + 5)  # 10 s more of use
    with db.read_session() as s:
        assert jobs.get_job(s, whole).energy == pytest.approx(2 * 100.0 * 20)
