"""A GPU model named without its size (``gpu_type: A100``) matches every size of
that model the cluster has; it was read as ``A100-80GB`` whenever the exact name was not in
the inventory, so an A100-40GB cluster refused the job ("no GPUs of type A100-80GB", a name
the user never wrote) and a mixed one left its 40 GB cards out. The spec keeps what the user
wrote; a memory quota and ``gpu_memory`` still apply per size."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import user_and_nodes

from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.core.spec import parse_spec
from danlu.core.units import GiB
from danlu.server.db import Database
from danlu.server.errors import AdmissionError
from danlu.server.services import admission, jobs, projects
from danlu.server.services.view import build_snapshot

NOW = 1_000_000.0
A40, A80 = gpu_type("A100-40GB"), gpu_type("A100-80GB")
V16, V32 = gpu_type("V100-16GB"), gpu_type("V100-32GB")
SMALL_ONLY = (Node("small", 4, A40),)
MIXED = (Node("big", 4, A80), Node("small", 4, A40))
"""Four 80 GB and four 40 GB A100s: the large come first, where a policy looks first."""


def _spec(kinds: str | list[str], **resources: Any) -> dict[str, Any]:
    return {
        "name": "a",
        "command": ["true"],
        "resources": {"gpus": 1, "gpu_type": kinds, **resources},
    }


@pytest.mark.parametrize(
    ("nodes", "kinds", "canonical"),
    [
        (SMALL_ONLY, "A100", {"A100-40GB"}),
        (SMALL_ONLY, "a100", {"A100-40GB"}),
        (MIXED, "A100", {"A100-40GB", "A100-80GB"}),
        (MIXED, "A100-80GB", {"A100-80GB"}),
        (MIXED, "a100-40", {"A100-40GB"}),
        (MIXED, ["a100", "A100-40GB"], {"A100-40GB", "A100-80GB"}),
        ((Node("v", 2, V16),), "V100", {"V100-16GB"}),
        ((Node("v", 2, V16), Node("w", 2, V32)), "v100", {"V100-16GB", "V100-32GB"}),
        ((Node("h", 2, gpu_type("H100")),), "h100", {"H100"}),
    ],
    ids=[
        "a100-on-40gb",
        "lower-case",
        "a100-on-mixed",
        "exact-size",
        "size-alias",
        "model-and-size",
        "v100-on-16gb",
        "v100-on-mixed",
        "no-sizes",
    ],
)
def test_a_model_without_a_size_names_every_size_present(
    nodes: tuple[Node, ...], kinds: str | list[str], canonical: set[str]
) -> None:
    spec = parse_spec(_spec(kinds))
    assert admission.canonical_gpu_types(spec, Cluster(nodes)) == canonical


def test_a_model_absent_from_the_cluster_is_refused_by_the_name_written() -> None:
    cluster = Cluster((Node("h", 2, gpu_type("H100")), Node("l", 2, gpu_type("L4"))))
    spec = parse_spec(_spec("A100"))
    types = admission.canonical_gpu_types(spec, cluster)
    request = admission.build_request("j", spec, submit_time=0.0, seq=0, priority=0,
                                      gpu_memory=None, gpu_types=types)  # fmt: skip
    problem = admission.never_fits(request, cluster)
    assert problem is not None and problem.field == "resources.gpu_type"
    assert "A100-80GB" not in str(problem) and "A100-40GB" not in str(problem)
    assert "type A100" in str(problem) and "H100, L4" in str(problem)


def test_an_unknown_name_still_lists_the_cluster_types() -> None:
    spec = parse_spec(_spec("B300"))
    with pytest.raises(
        AdmissionError, match=r"unknown GPU type 'B300'; this cluster has A100-40GB\Z"
    ):
        admission.canonical_gpu_types(spec, Cluster(SMALL_ONLY))
    loose = admission.canonical_gpu_types(spec, Cluster(SMALL_ONLY), strict=False)
    assert loose == {"B300"}


def test_a100_runs_on_an_a100_40gb_cluster(db: Database) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, SMALL_ONLY, NOW)
        job = jobs.submit(s, _spec("A100"), alice, now=NOW)
        assert jobs.job_spec(job).resources.gpu_type == ["A100"]  # as written
    with db.session() as s:
        (pending,) = build_snapshot(s, NOW).view.pending
    assert pending.request.gpu_types == frozenset({"A100-40GB"})


def test_a100_on_a_mixed_cluster_may_take_either_size(db: Database) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, MIXED, NOW)
        jobs.submit(s, _spec("A100", gpus=8), alice, now=NOW)  # all eight: both sizes
    with db.session() as s:
        (pending,) = build_snapshot(s, NOW).view.pending
    assert pending.request.gpu_types == frozenset({"A100-40GB", "A100-80GB"})


def test_gpu_memory_still_counts_only_the_sizes_that_hold_it(db: Database) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, MIXED, NOW)
        with pytest.raises(AdmissionError, match="4 such GPUs") as err:
            jobs.submit(s, _spec("A100", gpus=5, gpu_memory="60GiB"), alice, now=NOW)
        assert err.value.field == "resources.gpus"
        jobs.submit(s, _spec("A100", gpus=4, gpu_memory="60GiB"), alice, now=NOW)


def test_a_memory_quota_still_cuts_the_sizes_per_size(db: Database) -> None:
    with db.session() as s:
        alice = user_and_nodes(s, MIXED, NOW)
        projects.create_project(s, "vision", quota_gpu_memory=100 * GiB, now=NOW)
        body = _spec("A100", gpus=2) | {"project": "vision"}
        jobs.submit(s, body, alice, now=NOW)
    with db.session() as s:  # two 40 GB GPUs (80 GiB) fit the quota, two 80 GB ones do not
        (pending,) = build_snapshot(s, NOW).view.pending
    assert pending.request.gpu_types == frozenset({"A100-40GB"})


@pytest.mark.parametrize(
    ("nodes", "kinds", "capacity_gib"),
    [(SMALL_ONLY, "a100", 40), (MIXED, "A100", 40), (MIXED, "A100-80GB", 80)],
    ids=["a100-on-40gb", "a100-on-mixed", "exact-size"],
)
def test_the_memory_estimate_plans_for_the_sizes_the_scheduler_may_use(
    nodes: tuple[Node, ...], kinds: str, capacity_gib: int
) -> None:
    """The estimate's GPU is the smallest the job may land on, found as the scheduler finds
    its types (``a100`` matched no node before: the estimate fell back to the default GPU)."""
    from danlu.server.routes.estimation import _gpu_spec

    gpu = _gpu_spec(parse_spec(_spec(kinds)), Cluster(nodes))
    assert abs(gpu.capacity_bytes - capacity_gib * GiB) < 2 * GiB, gpu
