"""A real Ray cluster (``ray_cluster``) with a node whose workers cannot import danlu: the
poll of a run whose actor could not start there names that node
(:attr:`ExecStatus.start_failed_on`), which the control plane counts as a launch that failed
for the node's reasons; a run whose command failed by itself names none."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ray_cluster import ray_cluster
from run_helpers import launch, wait

from danlu.executors import GpuSlot, Outcome
from danlu.executors.ray_executor import RayExecutor

# Its runs make ``danlu-run-*`` folders, which test_ray.py counts: same xdist worker.
pytestmark = pytest.mark.xdist_group("ray")

SRC = str(Path(__file__).resolve().parents[2] / "src")


def test_a_run_that_cannot_start_on_a_node_names_it_and_a_failing_job_names_none(
    tmp_path: Path,
) -> None:
    empty = tmp_path / "no-danlu"
    # first on that node's path: a danlu that cannot be imported, as on a node without it
    # (this machine may have danlu installed, which a bare PYTHONPATH would not hide)
    (empty / "danlu").mkdir(parents=True)
    (empty / "danlu" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'danlu'\", name='danlu')\n"
    )
    with ray_cluster() as cluster:
        # a node whose Ray workers find no danlu: its raylet's PYTHONPATH lacks it
        cluster.add_node(
            num_cpus=1,
            num_gpus=2,
            labels={"danlu.node": "n3"},
            env_vars={"PYTHONPATH": str(empty)},
        )
        cluster.wait_for_nodes()
        base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": SRC}
        ex = RayExecutor(
            tmp_path / "state",
            address=None,
            namespace="danlu-test",
            base_env=base,
            cancel_grace=1.0,
        )
        try:
            names = [node.name for node in ex.refresh_inventory().nodes]
            n1, n3 = names.index("n1"), names.index("n3")
            alone = ex.submit(launch("bare", "print(1)", gpus=(GpuSlot(n3, 0),)))
            status = wait(ex, alone)
            assert status.outcome is Outcome.FAILED and not status.node_lost
            assert "n3: ModuleNotFoundError: No module named 'danlu'" in status.message
            assert status.start_failed_on == ("n3",)
            assert ex.poll(alone).start_failed_on == ("n3",)  # recorded: polled again

            both = ex.submit(launch("both", "print(1)", gpus=(GpuSlot(n1, 0), GpuSlot(n3, 1))))
            status = wait(ex, both)
            assert status.outcome is Outcome.FAILED and status.start_failed_on == ("n3",)

            own = ex.submit(launch("own", "raise SystemExit(1)", gpus=(GpuSlot(n1, 1),)))
            status = wait(ex, own)
            assert status.outcome is Outcome.FAILED and status.exit_code == 1
            assert status.start_failed_on == ()
        finally:
            ex.close()
