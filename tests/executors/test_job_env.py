"""The environment each executor builds for a job, without a cluster behind it: a sweep
trial's and an array task's own ``DANLU_*`` variables reach the job under every executor,
the control plane's inherited ``DANLU_*`` settings never do, and the danlu job environment
wins over a spec's variable of the same name."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from danlu.core.cluster import Cluster
from danlu.executors import GpuSlot, JobLaunch, LocalExecutor

BASE = {"PATH": "/usr/bin:/bin", "DANLU_JOB_ID": "the-server's", "DANLU_HOME": "/srv/danlu"}
TRIAL = {
    "DANLU_HPARAMS": json.dumps({"lr": 0.01}),
    "DANLU_SWEEP_ID": "sw1",
    "DANLU_TRIAL": "3",
    "DANLU_ARRAY_INDEX": "7",
    "DANLU_JOB_ID": "the-spec's",  # the control plane's own wins
    "MY_VAR": "kept",
}
JOB = JobLaunch("trial-3", ("python", "train.py"), env=TRIAL, gpus=(GpuSlot(0, 0),), token="t")


def local_env(tmp_path: Path, job: JobLaunch) -> dict[str, str]:
    executor = LocalExecutor(Cluster.homogeneous(1, 1), tmp_path / "local", base_env=BASE)
    return executor.child_env(job)


def slurm_env(tmp_path: Path, job: JobLaunch) -> dict[str, str]:
    from danlu.executors.slurm import SlurmExecutor
    from danlu.executors.slurmctl import SlurmCommands

    executor = SlurmExecutor(SlurmCommands(), tmp_path / "slurm", base_env=BASE)
    return executor.job_env(job)


def ray_env(tmp_path: Path, job: JobLaunch) -> dict[str, str]:
    """The Ray executor's :meth:`node_env` on an instance that never joined a cluster (its
    constructor would): only the two attributes the method reads are set, as the
    constructor sets them."""
    pytest.importorskip("ray")
    from danlu.executors.ray_executor import RayExecutor, public_env

    executor = RayExecutor.__new__(RayExecutor)
    executor._base_env = public_env(BASE)
    executor._api_url = None
    return executor.node_env(job, 0, ["n0"], "0", "n0")


BUILDERS: dict[str, Callable[[Path, JobLaunch], dict[str, str]]] = {
    "local": local_env,
    "slurm": slurm_env,
    "ray": ray_env,
}


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_a_trials_own_danlu_variables_reach_the_job(name: str, tmp_path: Path) -> None:
    env = BUILDERS[name](tmp_path, JOB)
    own = {key: env.get(key) for key in TRIAL if key != "DANLU_JOB_ID"}
    assert own == {key: value for key, value in TRIAL.items() if key != "DANLU_JOB_ID"}
    assert env["DANLU_JOB_ID"] == "trial-3"  # the danlu job environment wins
    assert env["DANLU_TOKEN"] == "t"
    assert "DANLU_HOME" not in env  # the control plane's own settings stay its own
    assert env["PATH"] == BASE["PATH"]


@pytest.mark.parametrize(
    ("name", "backend"),
    [("slurm", "SLURM_JOB_ID"), ("slurm", "SBATCH_PARTITION"), ("ray", "RAY_ADDRESS")],
)
def test_the_backends_own_variables_stay_out_of_the_job(
    name: str, backend: str, tmp_path: Path
) -> None:
    job = JobLaunch("j-1", ("python", "train.py"), env={backend: "elsewhere", "MY_VAR": "x"})
    env = BUILDERS[name](tmp_path, job)
    assert backend not in env and env["MY_VAR"] == "x"
