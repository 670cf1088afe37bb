"""The simulator skips rounds in which nothing can change: skipping must never change a job's
start or end compared with a round at every tick (as the server runs them).

A round that starts, preempts, resizes or rebatches a job changes what the next round sees,
so the next round is due at the next tick whatever the plan's ``recheck_at`` says (the
policies set it for the clock alone, after their own plan). Review 66: priority started a
low-priority job on the free GPUs while a high-priority one waited (the next round preempts
it), and Tiresias left a job out that the next round starts; the engine skipped both rounds.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from danlu.core.cluster import Cluster
from danlu.sched.policies.base import Policy
from danlu.sched.registry import make_policy
from danlu.sched.view import ClusterView, Plan, Preempt
from danlu.sim.config import SimConfig
from danlu.sim.engine import Simulator
from danlu.sim.metrics import SimResult
from danlu.sim.workload import load_workload

HEADER = "name,submit_time,gpus,duration,priority,gpu_memory\n"
# j0 (priority 0, waited longer) starts at 5100 on the 2 free GPUs while j4 (priority 1,
# 1 GPU) waits; the round at 5160 preempts j0 for j4.
PRIORITY_SKIP = HEADER + (
    "j0,710,2,5000,0,\n"
    "j1,0,1,20000,1,\n"
    "j2,0,2,5000,1,\n"
    "j3,8973,1,1000,0,20000000000\n"
    "j4,5013,1,1000,1,\n"
    "j5,3666,1,5000,1,20000000000\n"
    "j6,6336,4,1000,0,\n"
)
# Tiresias' round at 9240 starts j3, j1 and j0, and j5 on j3's GPU (both ask for part of one
# by memory). Until review 75 its admission charged j5's share as a whole GPU, left it out,
# and the round at 9300 started it: the round that leaves a job out must not be skipped.
STARVE_MIN = HEADER + (
    "j0,710,2,5000,0,\n"
    "j1,0,1,20000,1,\n"
    "j2,0,2,5000,1,\n"
    "j3,8973,1,1000,0,20000000000\n"
    "j5,3666,1,5000,1,20000000000\n"
    "j6,6336,4,1000,0,\n"
)
STARVATION = {"thresholds": (1000.0,), "starvation_factor": 2.0}

Times = dict[str, tuple[float | None, float | None, int]]


@dataclass
class EveryTick:
    """The same policy, but every plan asks for the round at the next tick (``recheck_at``
    0), so the engine skips none."""

    inner: Policy

    @property
    def name(self) -> str:
        """The wrapped policy's name."""
        return self.inner.name

    def schedule(self, view: ClusterView) -> Plan:
        """The wrapped policy's plan, due again at the next tick."""
        return replace(self.inner.schedule(view), recheck_at=0.0)


def _run(path: Path, policy: Policy) -> SimResult:
    return Simulator(Cluster.homogeneous(1, 4), policy, load_workload(path), SimConfig()).run()


def _times(result: SimResult) -> Times:
    return {r.id: (r.start_time, round(r.end_time or 0.0, 6), r.preemptions) for r in result.jobs}


def _both(path: Path, name: str, options: dict[str, object]) -> tuple[SimResult, SimResult]:
    """``name``'s run as the engine skips rounds, and with a round at every tick."""
    skipping = _run(path, make_policy(name, **options))
    every = _run(path, EveryTick(make_policy(name, **options)))
    return skipping, every


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(text)
    return path


def test_priority_starts_the_higher_job_first_and_skips_no_round(tmp_path: Path) -> None:
    skipping, every = _both(_write(tmp_path, PRIORITY_SKIP), "priority", {})
    times = _times(skipping)
    # review 69: j0 no longer starts at 5100 only to be preempted for j4 at 5160; j4 starts
    # at once and j0 once j4's GPU frees up (before: j4 (5160, 6160), j0 (5100, 11150, 1))
    assert times["j4"][:2] == (5100.0, 6100.0)
    assert times["j0"] == (6120.0, 11120.0, 0)
    assert times == _times(every)
    assert skipping.summary()["avg_jct"] == pytest.approx(57462.0 / 7)


def test_tiresias_starts_the_job_its_last_round_left_out_at_the_next_tick(
    tmp_path: Path,
) -> None:
    skipping, every = _both(_write(tmp_path, STARVE_MIN), "tiresias", STARVATION)
    times = _times(skipping)
    assert times["j3"][:2] == (9240.0, 10240.0)
    assert times["j5"][:2] == (3720.0, 9380.0)  # restarted at 9240 (at 9300 before review 75)
    assert times == _times(every)


def _random_trace(seed: int) -> str:
    """3 to 7 small jobs on 4 GPUs: whole GPUs or a part of one by memory, two priorities."""
    rng = random.Random(seed)
    lines = [HEADER]
    for i in range(rng.randint(3, 7)):
        memory = rng.choice(["", "", "20000000000"])
        gpus = 1 if memory else rng.choice([1, 1, 2, 4])
        submit = rng.randint(0, 3) * rng.randint(0, 3000)
        duration = rng.choice([100, 1000, 5000, 20000])
        lines.append(f"j{i},{submit},{gpus},{duration},{rng.choice([0, 0, 1])},{memory}\n")
    return "".join(lines)


# Each policy's seeds: those whose results the skipped rounds changed (of the first 200
# seeds searched), and some that never differed.
RANDOM_CASES = [
    *[("priority", "defaults", seed) for seed in (29, 147, 0, 1)],
    *[("tiresias", "defaults", seed) for seed in (147, 0, 1)],
    *[("tiresias", "starvation", seed) for seed in (29, 94, 193, 0)],
    *[("value-density", "defaults", seed) for seed in (27, 0, 1)],
]
OPTIONS: dict[str, dict[str, object]] = {"defaults": {}, "starvation": STARVATION}


@pytest.mark.parametrize(
    ("name", "options", "seed"),
    RANDOM_CASES,
    ids=[f"{name}-{options}-seed{seed}" for name, options, seed in RANDOM_CASES],
)
def test_skipping_rounds_changes_no_job_time(
    tmp_path: Path, name: str, options: str, seed: int
) -> None:
    skipping, every = _both(_write(tmp_path, _random_trace(seed)), name, OPTIONS[options])
    assert _times(skipping) == _times(every)
    assert skipping.rounds <= every.rounds


def test_a_round_that_changes_nothing_still_skips_to_the_next_event(tmp_path: Path) -> None:
    # "long" starts at 60 and runs 10^6 s; "wide" (4 GPUs) waits for it. The round after the
    # start (at 120) changes nothing, so the engine waits for the completion, not every tick:
    # rounds at 60 (starts long), 120, 1000080 (starts wide) and 1000140 (changes nothing).
    path = _write(tmp_path, HEADER + "long,0,1,1000000,0,\nwide,100,4,100,0,\n")
    for name in ("priority", "fifo", "sjf"):
        result = _run(path, make_policy(name))
        assert _times(result) == {
            "long": (60.0, 1000060.0, 0),
            "wide": (1000080.0, 1000180.0, 0),
        }, name
        assert result.rounds == 4, (name, result.rounds)


@dataclass
class KickOnce:
    """FIFO, except that its first round with a running job stops that job and starts
    nothing (``recheck_at`` inf): only the round at the next tick starts it again."""

    inner: Policy

    @property
    def name(self) -> str:
        """The name the results carry."""
        return "kick-once"

    def schedule(self, view: ClusterView) -> Plan:
        """Preempt the first running job not yet kicked, else FIFO's plan."""
        for job in view.running:
            if not job.marks.get("kicked"):
                return Plan(
                    preempts=(Preempt(job.request.id, "kicked once"),),
                    marks={job.request.id: {"kicked": 1.0}},
                    recheck_at=math.inf,
                )
        return self.inner.schedule(view)


def test_a_round_that_only_preempts_is_not_an_idle_cluster(tmp_path: Path) -> None:
    # The round at 120 stops "a" and leaves the cluster idle with "a" waiting: it changed
    # the state, so the round at 180 starts "a" again instead of failing it as stuck.
    path = _write(tmp_path, HEADER + "a,0,1,100,0,\n")
    skipping = _run(path, KickOnce(make_policy("fifo")))
    every = _run(path, EveryTick(KickOnce(make_policy("fifo"))))
    assert skipping.rejected == []
    # 60 s done by 120; from 180 the 30 s restart and the 40 s left
    assert _times(skipping) == {"a": (60.0, 250.0, 1)}
    assert _times(skipping) == _times(every)
