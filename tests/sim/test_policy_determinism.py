"""Every registered policy is deterministic for a seed: the same workload gives the same
per-job results twice in one process, and in two processes whose string hashes differ
(``PYTHONHASHSEED``), so no plan depends on set or dict order of hashed names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from danlu.core.cluster import Cluster
from danlu.sched.registry import default_registry, make_policy
from danlu.sim.config import SimConfig
from danlu.sim.elastic import load_profiles
from danlu.sim.engine import Simulator
from danlu.sim.workload import load_workload

ROOT = Path(__file__).parents[2]
TRACES = ROOT / ".." / "shared" / "data" / "pollux" / "traces"
pytestmark = pytest.mark.skipif(not TRACES.is_dir(), reason="Pollux traces not present")

# Jobs of three applications arriving together and apart, on more GPUs than the cluster
# frees at once: the policies queue, share, resize and preempt.
WORKLOAD = """name,time,application,num_replicas,batch_size
ncf-0,0,ncf,1,32768
cifar10-1,0,cifar10,4,2048
ncf-2,0,ncf,1,32768
cifar10-3,30,cifar10,8,2048
bert-4,40,bert,4,384
ncf-5,50,ncf,2,32768
cifar10-6,300,cifar10,2,2048
"""
OPTIONS: dict[str, dict[str, Any]] = {"pollux": {"population": 20, "generations": 20}}
"""A smaller genetic search for pollux (its default takes seconds a run): still seeded."""


def per_job_results(workload_dir: str) -> dict[str, list[dict[str, Any]]]:
    """Each registered policy's per-job results (the JSON ``per_job`` list and the
    rejected jobs) on :data:`WORKLOAD` over 2 nodes of 4 GPUs, by policy name."""
    path = Path(workload_dir) / "determinism.csv"
    path.write_text(WORKLOAD)
    profiles = dict(load_profiles(TRACES))
    out: dict[str, list[dict[str, Any]]] = {}
    for name in default_registry().names():
        result = Simulator(
            Cluster.homogeneous(2, 4),
            make_policy(name, **OPTIONS.get(name, {})),
            load_workload(path),
            SimConfig(event_rounds=True),
            profiles,
        ).run()
        data = result.to_json()
        out[name] = [*data["per_job"], *data["rejected"]]
    return out


@pytest.fixture(scope="module")
def in_process(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    return per_job_results(str(tmp_path_factory.mktemp("first")))


def test_every_policy_repeats_its_results_in_one_process(
    in_process: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    assert set(in_process) == set(default_registry().names())
    for name, jobs in in_process.items():
        assert len(jobs) == WORKLOAD.count("\n") - 1, name
        assert any(job.get("end_time") is not None for job in jobs), name
    again = per_job_results(str(tmp_path))
    for name in in_process:
        assert again[name] == in_process[name], name


def _in_subprocess(tmp: Path, hash_seed: str) -> dict[str, list[dict[str, Any]]]:
    """:func:`per_job_results` in a new interpreter with ``PYTHONHASHSEED=hash_seed``."""
    code = (
        "import json, runpy, sys; "
        "f = runpy.run_path(sys.argv[1])['per_job_results']; "
        "print(json.dumps(f(sys.argv[2])))"
    )
    env = {
        **os.environ,
        "PYTHONHASHSEED": hash_seed,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    tmp.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", code, __file__, str(tmp)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    results: dict[str, list[dict[str, Any]]] = json.loads(done.stdout.splitlines()[-1])
    return results


def test_every_policy_repeats_its_results_across_hash_seeds(
    in_process: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    first = _in_subprocess(tmp_path / "a", "1")
    second = _in_subprocess(tmp_path / "b", "2")
    expected = json.loads(json.dumps(in_process))  # as JSON reads it (tuples as lists)
    for name in expected:
        assert first[name] == second[name], name
        assert first[name] == expected[name], name
