"""The engine: a second ``Simulator.run()`` went on from the first run's end
state; it appended to the first result's timeline (which then ran backwards) and either
returned the first run's jobs again or crashed in the policy's view, blaming the view."""

from __future__ import annotations

import pytest

from danlu.core.cluster import Cluster
from danlu.core.errors import ConfigError
from danlu.sched.registry import make_policy
from danlu.sim.config import SimConfig
from danlu.sim.engine import Simulator
from danlu.sim.workload import synthetic_workload


@pytest.mark.parametrize("max_time", [float("inf"), 3000.0])
def test_a_second_run_is_refused_and_leaves_the_first_result(max_time: float) -> None:
    workload = synthetic_workload(jobs=20, seed=1, hours=1)
    config = SimConfig(max_time=max_time)
    simulator = Simulator(Cluster.homogeneous(2, 8), make_policy("fifo"), workload, config)
    first = simulator.run()
    times = list(first.timeline.times)
    summary = first.summary()
    with pytest.raises(ConfigError, match=r"run\(\) was already called.*new Simulator"):
        simulator.run()
    assert first.timeline.times == times  # nothing appended to the first result
    assert times == sorted(times)
    assert first.summary() == summary
    # a new simulator of the same inputs gives the same result
    again = Simulator(Cluster.homogeneous(2, 8), make_policy("fifo"), workload, config).run()
    assert again.to_json(timeline=True) == first.to_json(timeline=True)
