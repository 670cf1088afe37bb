"""Traces whose measured points cannot be interpolated between (too few, or all in one plane):
a placement they do not measure is outside the profile, a clear error, not qhull's traceback."""

from __future__ import annotations

import numpy as np
import pytest

from danlu.core.cluster import Cluster
from danlu.core.errors import DanluError
from danlu.sched.registry import make_policy
from danlu.sched.view import JobRequest
from danlu.sim.config import SimConfig
from danlu.sim.elastic import ApplicationProfile, OutOfProfileError, Placement
from danlu.sim.engine import Simulator
from danlu.sim.workload import ProfiledWork, Workload, WorkloadJob


def _profile(placements: tuple[Placement, ...], scalability: int) -> ApplicationProfile:
    """A tiny profile measured at ``placements`` (local batches 32 and 64) with
    ``scalability`` rows of two nodes, two replicas."""
    measured = {
        placement: (np.array([32.0, 64.0]), np.array([0.1, 0.2]), np.array([0.01, 0.01]))
        for placement in placements
    }
    stats = (np.array([100.0, 200.0]), np.array([1.0, 1.0]), np.array([1.0, 1.0]))
    return ApplicationProfile(
        "tiny",
        validation={32: stats, 128: stats},
        placements=measured,
        scalability=[(2.0, 2.0, 32.0 * (i + 1), 0.2, 0.1) for i in range(scalability)],
    )


@pytest.mark.parametrize(
    ("placements", "scalability"),
    [
        (((1,),), 1),  # three points: too few for a simplex in three dimensions
        (((1,), (2,), (4,)), 0),  # every point on one node: all in one plane
    ],
)
def test_an_unmeasured_placement_of_flat_traces_is_out_of_profile(
    placements: tuple[Placement, ...], scalability: int
) -> None:
    profile = _profile(placements, scalability)
    assert profile.step_time((1,), 32) == (0.1, 0.01)  # measured placements still run
    with pytest.raises(OutOfProfileError, match="measured placements") as caught:
        profile.step_time((1, 1, 1), 32)
    assert "tiny" in str(caught.value)
    with pytest.raises(OutOfProfileError, match="measured placements"):  # and again
        profile.step_time((1, 1, 1), 64)


def test_a_policy_running_an_unmeasured_placement_gets_a_clear_error() -> None:
    profile = _profile(((1,),), 1)
    request = JobRequest(id="wide", submit_time=0.0, gpus=2, seq=0, batch_size=64)
    workload = Workload("w", "pollux", (WorkloadJob(request, ProfiledWork("tiny", 64)),))
    simulator = Simulator(
        Cluster.homogeneous(2, 1),
        make_policy("fifo"),
        workload,
        SimConfig(),
        profiles={"tiny": profile},
    )
    with pytest.raises(DanluError, match="profile does not cover") as caught:
        simulator.run()
    assert "measured placements (1)" in str(caught.value)
