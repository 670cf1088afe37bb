"""Control planes of several homes joining one real Ray cluster (``ray.cluster_utils``, a head
alone: claiming reads no node): a plane's executor, built as ``danlu server`` builds it, holds
the cluster and one of another home is refused naming it; the same home's takes its own claim
over; the holder's clean stop lets a plane in a process of its own take it, and once that
process is killed (``kill -9``: no clean stop) the refused home's plane starts. The look a
start-up takes before it makes its home refuses another home's claim too, making nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from danlu.config import load_settings
from danlu.core.errors import ConfigError
from danlu.executors import Executor
from danlu.executors.ray_executor import check_unclaimed
from danlu.server.app import build_cluster_executor

SRC = str(Path(__file__).resolve().parents[2] / "src")

# One Ray cluster at a time: under pytest-xdist these modules share one worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]

HOLDER = """
import sys, time
from pathlib import Path
from danlu.executors.ray_executor import RayExecutor
home = Path(sys.argv[2])
RayExecutor(home / "executor", address=sys.argv[1], api_url="http://a-host:8470", plane_home=home)
print("claimed", flush=True)
time.sleep(300)
"""
"""A plane's executor (as ``danlu server`` builds it, lighter to import) holding the cluster
until it is killed."""


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    try:
        import ray
        from ray.cluster_utils import Cluster
    except ImportError:
        if os.environ.get("DANLU_TEST_REQUIRE_RAY"):
            pytest.fail("Ray is required: pip install -e '.[ray]'")
        pytest.skip("Ray is not installed (pip install -e '.[ray]')")
    started = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
    try:
        ray.init(address=started.address, namespace="danlu-test", log_to_driver=False)
        yield started
    finally:
        ray.shutdown()
        started.shutdown()


def plane(cluster: Any, home: Path, url: str) -> Executor:
    """The executor of ``home``'s plane, built as ``danlu server`` builds it (this process
    has joined the cluster already)."""
    settings = load_settings(home=home, executor="ray", ray_address=cluster.address)
    return build_cluster_executor(settings, url)


def test_one_plane_holds_the_cluster_until_it_is_gone(cluster: Any, tmp_path: Path) -> None:
    b = plane(cluster, tmp_path / "b", "http://b-host:8470")
    c = tmp_path / "c"  # the look a start-up takes before it makes its home: nothing made
    with pytest.raises(ConfigError, match="http://b-host:8470"):
        check_unclaimed(c / "executor", c, cluster.address)
    assert not c.exists()
    check_unclaimed(tmp_path / "b" / "executor", tmp_path / "b", cluster.address)  # its own
    with pytest.raises(ConfigError, match="http://b-host:8470"):
        plane(cluster, tmp_path / "c", "http://c-host:8470")
    b = plane(cluster, tmp_path / "b", "http://b-again:8470")  # its own claim taken over
    with pytest.raises(ConfigError, match="http://b-again:8470"):
        plane(cluster, tmp_path / "c", "http://c-host:8470")
    b.close()  # a clean stop gives the claim back
    env = {**os.environ, "PYTHONPATH": SRC}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, cluster.address, str(tmp_path / "a")],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "claimed\n"
        with pytest.raises(ConfigError) as refused:
            plane(cluster, tmp_path / "c", "http://c-host:8470")
        said = str(refused.value)
        assert f"home {(tmp_path / 'a').resolve()} on " in said and f"(pid {holder.pid}, " in said
        assert "http://a-host:8470" in said and "stop it" in said
    finally:
        os.kill(holder.pid, signal.SIGKILL)  # no clean stop: Ray ends its claim with it
        holder.wait()
    plane(cluster, tmp_path / "c", "http://c-host:8470").close()
