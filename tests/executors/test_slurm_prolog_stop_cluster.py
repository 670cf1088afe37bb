"""Against a real Slurm cluster whose nodes run a ``Prolog`` before each job
(``PrologFlags=Alloc``): a run stopped while its prolog runs, which Slurm reports
``RUNNING`` though none of the job's processes exists yet, still gets its SIGTERM. Slurm
sends ``scancel --signal=TERM`` only to the processes of the steps running then, so the
SIGTERM reached nothing, and the command, started once the prolog was over, ran on to the
SIGKILL at the end of the stop's grace. The task on each node reads the stop the executor
recorded before it sent the SIGTERM, and sends it to the command as soon as it is started."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from run_helpers import launch, wait
from slurm_cluster import CHECKPOINTS, SlurmCluster, available, executor_on, slurm_cluster

from danlu.executors import GpuSlot, Outcome, StopReason
from danlu.executors.slurmctl import SlurmCommands

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]


@pytest.fixture(scope="module")
def slurm_with_prolog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """The test cluster, its nodes running a prolog of 5 s before each job."""
    if not available():
        pytest.skip("Slurm is not installed (apt-get install -y slurm-wlm munge)")
    root = tmp_path_factory.mktemp("slurm-prolog")
    prolog = root / "prolog.sh"
    prolog.write_text("#!/bin/sh\nsleep 5\n")
    prolog.chmod(0o755)
    with slurm_cluster(root, f"Prolog={prolog}\nPrologFlags=Alloc\n") as cluster:
        yield cluster


def test_a_run_stopped_in_its_prolog_gets_its_sigterm(
    slurm_with_prolog: SlurmCluster, tmp_path: Path
) -> None:
    commands = SlurmCommands(slurm_with_prolog.env)
    ex = executor_on(slurm_with_prolog, tmp_path / "state")
    handle = ex.submit(launch("prolog-1", CHECKPOINTS, gpus=(GpuSlot(0, 0),)))
    (slurm_id,) = commands.find("danlu.prolog-1.0")
    deadline = time.monotonic() + 30
    while commands.jobs([slurm_id])[slurm_id].state != "RUNNING":  # its prolog runs
        assert time.monotonic() < deadline, "Slurm never started the job"
        time.sleep(0.1)
    try:
        ex.preempt(handle, 600.0)
        # lost, the SIGTERM came only with the SIGKILL at the end of the grace (600 s)
        status = wait(ex, handle, timeout=60)
        assert status.outcome is Outcome.PREEMPTED
        assert status.stop_reason is StopReason.PREEMPT
    finally:
        commands.cancel(slurm_id, "KILL", full=True)
