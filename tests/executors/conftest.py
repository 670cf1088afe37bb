"""The ``slurm`` fixture (the test Slurm cluster of :mod:`slurm_cluster`, one per module),
the ``os_user`` fixture (an OS account to start jobs as), the ``ex`` fixture (a local
executor of one GPU; a module that needs another executor defines an ``ex`` of its own) and
the ``fake`` fixture (the fake Ray of :mod:`fake_ray` with nodes ``n1`` and ``n2`` of four
GPUs, installed in place of ``ray``; a module that needs other nodes defines its own)."""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_ray import FakeRay, node
from slurm_cluster import SlurmCluster, available, slurm_cluster

from danlu.core.cluster import Cluster
from danlu.executors import LocalExecutor


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """The test cluster, for the tests of one module (skipped without Slurm)."""
    if not available():
        pytest.skip("Slurm is not installed (apt-get install -y slurm-wlm munge)")
    with slurm_cluster(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def os_user() -> Iterator[str]:
    """A fresh OS account (no home, no login shell) for the module's tests, removed after;
    they need root, which CI has (skipped elsewhere: only root can start jobs as others)."""
    if os.geteuid() != 0:
        pytest.skip("starting jobs as another OS account needs root")
    name = f"dl{secrets.token_hex(4)}"
    subprocess.run(
        ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        check=True,
        capture_output=True,
    )
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True)


@pytest.fixture
def ex(tmp_path: Path) -> LocalExecutor:
    """A local executor of one GPU, its state in ``tmp_path/state``."""
    return LocalExecutor(
        Cluster.homogeneous(1, 1, "A100-80GB"),
        tmp_path / "state",
        base_env={"PATH": "/usr/bin:/bin"},
        cancel_grace=1.0,
    )


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRay]:
    """The fake Ray with nodes ``n1`` and ``n2``, installed; its actors closed after."""
    ray = FakeRay([node("n1"), node("n2")]).install(monkeypatch)
    try:
        yield ray
    finally:
        ray.close_all()
