"""Quotas in the simulator (``SimConfig.quotas``, ``danlu sim run --quota``): the server's
rules (``danlu.sched.quota``) around any policy."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from danlu.cli.main import app
from danlu.cli.sim import parse_quotas
from danlu.core.cluster import Cluster
from danlu.core.errors import ConfigError
from danlu.sched.policies.base import Policy
from danlu.sched.quota import Quota, Quotas, held
from danlu.sched.registry import make_policy
from danlu.sched.view import ClusterView, Plan
from danlu.sim.config import SimConfig
from danlu.sim.elastic import load_profiles
from danlu.sim.engine import Simulator
from danlu.sim.metrics import SimResult
from danlu.sim.workload import Workload, load_workload, synthetic_workload

PROJECTS = ("vision", "nlp", "speech")
USERS = ("ana", "bo", "cy", "di")


def _owned(jobs: int, seed: int) -> Workload:
    """The synthetic workload with each job given a project and a user, round-robin."""
    base = synthetic_workload(jobs=jobs, seed=seed)
    owned = tuple(
        replace(
            wj,
            request=replace(wj.request, project=PROJECTS[i % 3], user=USERS[i % 4]),
        )
        for i, wj in enumerate(base.jobs)
    )
    return replace(base, jobs=owned)


class _Counting:
    """A policy that checks every view it is handed holds each quota (and plans as
    ``inner``): the view is what the quota layer passed on after applying the plans."""

    def __init__(self, inner: Policy, quotas: Quotas) -> None:
        self.inner = inner
        self.quotas = quotas
        self.rounds = 0
        self.peak: dict[str, float] = {}

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def sizes_jobs(self) -> bool:
        return bool(getattr(self.inner, "sizes_jobs", False))

    def schedule(self, view: ClusterView) -> Plan:
        self.rounds += 1
        used: dict[str, float] = {}
        for job in view.running:
            for quota in self.quotas.of(job.request):
                used[quota.holder] = used.get(quota.holder, 0.0) + held(job.allocation).gpus
        limits = {
            q.holder: q.gpus for q in (*self.quotas.projects.values(), *self.quotas.users.values())
        }
        for holder, gpus in used.items():
            limit = limits[holder]
            assert limit is not None and gpus <= limit + 1e-9, (holder, gpus, limit)
            self.peak[holder] = max(self.peak.get(holder, 0.0), gpus)
        return self.inner.schedule(view)


def _simulate(workload: Workload, policy: Policy, quotas: Quotas, gpus: int = 4) -> SimResult:
    config = SimConfig(quotas=quotas)
    return Simulator(Cluster.homogeneous(8, gpus), policy, workload, config).run()


@pytest.mark.parametrize("policy", ["fifo", "tiresias", "danlu", "fair-share"])
def test_no_project_or_user_ever_holds_more_than_its_quota(policy: str) -> None:
    quotas = Quotas(
        {"vision": Quota("project 'vision'", 8), "nlp": Quota("project 'nlp'", 12)},
        {"ana": Quota("user 'ana'", 6)},
    )
    counting = _Counting(make_policy(policy), quotas)
    result = _simulate(_owned(90, 3), counting, quotas)
    summary = result.summary()
    # the 16-GPU gangs pass every quota of 8 and 12 on their own: rejected, the rest finish
    assert not result.unfinished and summary["jobs"] == 90 - len(result.rejected)
    assert all("can never start" in why for _, why in result.rejected)
    assert counting.rounds > 20
    assert counting.peak["project 'vision'"] == 8  # the quotas bind at times
    assert counting.peak["user 'ana'"] == 6


def test_quotas_slow_the_limited_project_and_the_run_is_deterministic() -> None:
    workload = _owned(120, 5)
    tight = Quotas({"vision": Quota("project 'vision'", 4)})
    free = _simulate(workload, make_policy("tiresias"), Quotas())
    limited = _simulate(workload, make_policy("tiresias"), tight)
    again = _simulate(workload, make_policy("tiresias"), tight)
    assert limited.to_json() == again.to_json()

    def vision_wait(result: SimResult) -> float:
        waits = [r.start_time - r.submit_time for r in result.jobs if r.id in vision_ids]
        return sum(w for w in waits if w is not None) / len(waits)

    vision_ids = {wj.request.id for wj in workload.jobs if wj.request.project == "vision"}
    assert vision_wait(limited) > vision_wait(free)


def test_parse_quotas_reads_project_and_user_pairs_and_names_the_bad_flag() -> None:
    quotas = parse_quotas(["vision=8", "nlp=0"], ["ana=2.5"])
    assert quotas.projects["vision"].gpus == 8 and quotas.projects["nlp"].gpus == 0
    assert quotas.users["ana"] == Quota("user 'ana'", 2.5)
    with pytest.raises(ConfigError, match="--quota 'vision' must look like PROJECT=GPUS"):
        parse_quotas(["vision"], [])
    with pytest.raises(ConfigError, match="--user-quota 'ana=-1'"):
        parse_quotas([], ["ana=-1"])


def test_sim_run_quota_flags(tmp_path: Path) -> None:
    workload = tmp_path / "w.csv"
    rows = ["name,submit_time,gpus,duration,project,user"]
    rows += [f"a{i},0,4,3600,vision,ana" for i in range(3)]
    rows += ["b0,0,4,3600,nlp,bo", "b1,0,4,3600,nlp,bo", "c0,0,8,600,speech,cy"]
    workload.write_text("\n".join(rows) + "\n")
    runner = CliRunner()
    out = tmp_path / "run.json"
    base = ["sim", "run", "--workload", str(workload), "--policy", "fifo", "--nodes", "2"]
    result = runner.invoke(
        app, [*base, "--quota", "vision=4", "--quota", "speech=4", "--quiet", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    starts = {j["id"]: j["start_time"] for j in data["per_job"]}
    assert starts["a0"] < starts["a1"] < starts["a2"]  # one vision job at a time
    assert starts["a1"] >= starts["a0"] + 3600
    assert starts["b0"] == 120.0  # the GPUs vision could not take went to nlp a round later
    why = "can never start: project 'speech' GPU quota: 8 asked > 4, by this job alone"
    assert data["rejected"] == [{"id": "c0", "reason": why}]
    # per project: the JSON's table and the printed one
    assert {j["id"]: j["project"] for j in data["per_job"]}["b1"] == "nlp"
    vision, nlp = data["projects"]["vision"], data["projects"]["nlp"]
    assert vision["jobs"] == 3 and nlp["jobs"] == 2
    # a project whose only job was rejected is listed with it (it was left out)
    speech = data["projects"]["speech"]
    assert speech["jobs"] == 0 and speech["rejected"] == 1 and speech["avg_jct"] is None
    assert vision["gpu_hours"] == 12.0 and vision["gpu_share"] == 0.6
    assert vision["avg_jct"] == (3660 + 7260 + 10860) / 3
    assert "byproject" in "".join(result.output.split())
    bad = runner.invoke(app, [*base, "--user-quota", "ana", "--quiet"])
    assert bad.exit_code == 2 and "--user-quota" in bad.output


POLLUX = Path(__file__).resolve().parents[2] / "../shared/data/pollux"


@pytest.mark.skipif(
    not (POLLUX / "traces").is_dir(),
    reason=f"Pollux artifact data not found at {POLLUX.resolve()} (../shared/data is absent)",
)
@pytest.mark.parametrize("policy", ["danlu", "pollux"])
def test_policies_that_size_jobs_keep_a_quota_and_finish_every_job(policy: str) -> None:
    """The Pollux workload's first 40 jobs (its ImageNet jobs ask for up to 32 GPUs), one
    project held to 8 of 64 GPUs: the policy sizes every job within it, moving and growing
    jobs (a dropped growth keeps its GPUs, so no move onto them is kept)."""
    full = load_workload(POLLUX / "workloads-0.5" / "workload-1.csv")
    workload = replace(full, jobs=full.jobs[:40])
    quotas = Quotas({"default": Quota("project 'default'", 8)})
    options = {"population": 8, "generations": 4} if policy == "pollux" else {}
    counting = _Counting(make_policy(policy, **options), quotas)
    config = SimConfig(quotas=quotas)
    profiles = load_profiles(POLLUX / "traces")
    result = Simulator(Cluster.homogeneous(16, 4), counting, workload, config, profiles).run()
    assert not result.rejected and not result.unfinished
    assert result.summary()["jobs"] == 40
    assert counting.peak["project 'default'"] == 8
    assert max(r.gpus for r in result.jobs) > 8  # requests wider than the quota ran
