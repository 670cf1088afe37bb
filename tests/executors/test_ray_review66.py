"""The Ray executor against a real Ray cluster: a node that leaves while a launch
onto it is made ends the run as lost with its node (Ray's ``ActorUnschedulableError``), and the
control plane's process outlives the Ray head's GCS (it joins the cluster as a Ray driver,
which Ray would abort once the GCS has been unreachable for its reconnect timeout).

The tests against a cluster start their own small one (one at a time): one leaves it without
a node, the other without its GCS. One more, against a fake Ray (:mod:`fake_ray`), makes the
calls that Ray's GCS answers hang."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from control_plane import server_env
from fake_ray import FakeRay, node
from ray_cluster import ray_cluster
from run_helpers import launch, wait

from danlu.executors import ExecutorUnavailableError, GpuSlot, Outcome, ray_executor

SRC = str(Path(__file__).resolve().parents[2] / "src")

# One Ray cluster at a time: under pytest-xdist these modules share one worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]


@pytest.fixture
def cluster() -> Iterator[Any]:
    """A cluster of its own for one test (a head, ``n1`` and ``n2``), joined from here."""
    with ray_cluster() as started:
        yield started


def executor(state: Path) -> Any:
    from danlu.executors.ray_executor import RayExecutor

    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": SRC}
    return RayExecutor(state, address=None, namespace="danlu-test", base_env=base, cancel_grace=1.0)


def _remove(cluster: Any, name: str) -> None:
    """Take the node labelled ``name`` out of the cluster; return once Ray counts it dead."""
    import ray

    (node_id,) = [n["NodeID"] for n in ray.nodes() if n["Labels"].get("danlu.node") == name]
    (node,) = [n for n in cluster.worker_nodes if n.node_id == node_id]
    cluster.remove_node(node)
    deadline = time.monotonic() + 30
    while any(n["Alive"] for n in ray.nodes() if n["NodeID"] == node_id):
        assert time.monotonic() < deadline, f"Ray still counts {name} alive after it left"
        time.sleep(0.2)


def _cmdlines() -> list[bytes]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                out.append((entry / "cmdline").read_bytes())
            except OSError:  # exited meanwhile
                continue
    return out


def test_a_node_that_leaves_during_a_launch_onto_it_makes_the_run_lost(
    cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """n2 leaves after the launch read it alive, before Ray placed its actor: Ray cannot
    schedule that actor (hard node affinity to a node that is gone), so the run is lost with
    n2, its actor on n1 is killed (and the command with it), n1's GPU is free again and a
    cancel has nothing left to fail on."""
    ex = executor(tmp_path / "state")
    names = [n.name for n in ex.inventory().nodes]
    n1, n2 = names.index("n1"), names.index("n2")
    read = ex._launch_nodes

    def then_n2_leaves(wanted: list[str]) -> dict[str, dict[str, Any]]:
        alive = read(wanted)
        _remove(cluster, "n2")
        return alive

    monkeypatch.setattr(ex, "_launch_nodes", then_n2_leaves)
    code = "import time; print('ready', flush=True); time.sleep(120)  # left66-marker"
    handle = ex.submit(launch("left-1", code, gpus=(GpuSlot(n1, 0), GpuSlot(n2, 0))))
    monkeypatch.undo()
    status = wait(ex, handle)
    assert status.outcome is Outcome.PREEMPTED and status.node_lost, status
    assert status.exit_code is None and "n2" in status.message, status
    ex.cancel(handle)  # the run has ended: nothing to stop, nothing to fail on
    deadline = time.monotonic() + 30  # the command on n1 ends with its actor
    while any(b"left66-marker" in line for line in _cmdlines()):
        assert time.monotonic() < deadline, "the job's command on n1 outlived its run"
        time.sleep(0.2)
    after = ex.submit(launch("after-1", "print('ok')", gpus=(GpuSlot(n1, 0),)))  # not busy
    assert wait(ex, after).outcome is Outcome.SUCCEEDED


DRIVER = """
import os, sys, time
from danlu.executors import ExecutorUnavailableError, GpuSlot, JobLaunch
from danlu.executors import ray_executor

ray_executor.GCS_TIMEOUT = 1.0  # a call Ray's GCS does not answer fails after 1 s
address, state = sys.argv[1], sys.argv[2]
ex = ray_executor.RayExecutor(
    state, address=address, namespace="danlu-gcs", cancel_grace=1.0,
    base_env={"PATH": os.environ["PATH"], "PYTHONPATH": os.environ["PYTHONPATH"]},
)
code = "import time; print('ready', flush=True); time.sleep(120)"
handle = ex.submit(JobLaunch("gcs-1", (sys.executable, "-c", code), gpus=(GpuSlot(0, 0),)))
while b"ready" not in ex.logs(handle)[0]:
    assert ex.poll(handle).running
    time.sleep(0.2)
print("READY", flush=True)
sys.stdin.readline()  # the head's GCS is killed now
deadline = time.monotonic() + float(sys.argv[3])
while time.monotonic() < deadline:
    for what, call in (
        ("poll", lambda: ex.poll(handle).state.value),
        ("refresh", lambda: len(ex.refresh_inventory().nodes)),
    ):
        try:
            answer = call()
        except ExecutorUnavailableError:
            answer = "unavailable"
        print(what, answer, flush=True)
    time.sleep(0.3)
print("SURVIVED", flush=True)
os._exit(0)  # Ray's exit handler would ask the GCS that is gone
"""


def test_the_control_plane_outlives_the_ray_gcs(tmp_path: Path) -> None:
    """A driver process (the executor of a control plane) whose Ray settings would abort it
    2 s after the GCS is gone (``RAY_gcs_rpc_server_reconnect_timeout_s``, as a cluster's
    nodes may carry): after the head's GCS is killed it goes on for 8 s, its polls answering
    (the actors are asked directly) or raising ``ExecutorUnavailableError``, its inventory
    reads raising it instead of blocking."""
    with ray_cluster(connect=False) as cluster:
        env = server_env({"RAY_gcs_rpc_server_reconnect_timeout_s": "2"})
        argv = [sys.executable, "-c", DRIVER, cluster.address, str(tmp_path / "state"), "8"]
        out = tmp_path / "driver.out"
        with out.open("wb") as sink:
            proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=sink, stderr=subprocess.STDOUT, env=env
            )
        try:
            deadline = time.monotonic() + 90
            while b"READY" not in out.read_bytes():
                assert proc.poll() is None, out.read_text(errors="replace")
                assert time.monotonic() < deadline, out.read_text(errors="replace")
                time.sleep(0.2)
            cluster.head_node.kill_gcs_server()
            assert proc.stdin is not None
            proc.stdin.write(b"\n")
            proc.stdin.flush()
            try:
                code = proc.wait(timeout=60)  # a hang guard: the driver loops for 8 s
            except subprocess.TimeoutExpired:
                code = None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = out.read_text(errors="replace")
    assert code == 0 and "SURVIVED" in text, text
    lines = text.split("READY", 1)[1].splitlines()
    assert {ln for ln in lines if ln.startswith("poll ")} <= {"poll RUNNING", "poll unavailable"}
    assert "refresh unavailable" in lines, text


def test_calls_ray_s_gcs_leaves_unanswered_are_unavailable_not_blocking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the GCS silent a read of the nodes is an ``ExecutorUnavailableError`` after
    ``GCS_TIMEOUT``, and so is every call while that one hangs; a launch whose actor Ray
    does not make in time is one too (the job launched again later, not failed), and the
    next launch of the run kills the actor Ray made late before it makes its own."""
    fake = FakeRay([node("n1")]).install(monkeypatch)
    monkeypatch.setattr(ray_executor, "GCS_TIMEOUT", 0.2)
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    ex = ray_executor.RayExecutor(tmp_path / "state", address=None, base_env=base)
    ex.inventory()
    back = threading.Event()
    listed = ex._ray.nodes

    def silent_nodes() -> Any:
        back.wait(60)
        return listed()

    monkeypatch.setattr(ex._ray, "nodes", silent_nodes)
    try:
        silent = re.escape("did not answer within 0.2 s")
        with pytest.raises(ExecutorUnavailableError, match=silent):
            ex.refresh_inventory()
        with pytest.raises(ExecutorUnavailableError, match=re.escape("has not answered (to read")):
            ex.submit(launch("gcs-1", "print('ok')", gpus=(GpuSlot(0, 0),)))
    finally:
        back.set()
    _until(lambda: _answers(ex))
    made = threading.Event()
    maker = ex._actor

    class SilentMaker:
        """Ray's actors, made once ``made`` is set (the GCS back)."""

        def options(self, **options: Any) -> Any:
            start = maker.options(**options).remote

            class Late:
                def remote(self, *args: Any, **kwargs: Any) -> Any:
                    made.wait(60)
                    return start(*args, **kwargs)

            return Late()

    monkeypatch.setattr(ex, "_actor", SilentMaker())
    code = "import time; print('ready', flush=True); time.sleep(60)"
    try:
        starting = re.escape("start Ray actor danlu.gcs-2.0.0")
        with pytest.raises(ExecutorUnavailableError, match=starting):
            ex.submit(launch("gcs-2", code, gpus=(GpuSlot(0, 0),)))
    finally:
        made.set()
    try:
        _until(lambda: fake.live("danlu.gcs-2.") == ["danlu.gcs-2.0.0"])  # made late
        late = fake.actors["danlu.gcs-2.0.0"]
        monkeypatch.setattr(ex, "_actor", maker)
        handle = ex.submit(launch("gcs-2", code, gpus=(GpuSlot(0, 0),)))
        assert late.is_dead and fake.killed == ["danlu.gcs-2.0.0"]
        assert fake.live("danlu.gcs-2.") == ["danlu.gcs-2.0.0"]  # the new launch's
        assert fake.actors["danlu.gcs-2.0.0"] is not late and ex.poll(handle).running
        ex.cancel(handle)
        assert wait(ex, handle).outcome is Outcome.FAILED  # a cancel fails it
    finally:
        fake.close_all()


def _answers(ex: Any) -> bool:
    """Whether a read of the nodes gets Ray's answer (no earlier call hangs any more)."""
    try:
        ex.refresh_inventory()
    except ExecutorUnavailableError:
        return False
    return True


def _until(check: Any, timeout: float = 30.0) -> None:
    """Return once ``check()`` is true; fail after ``timeout`` seconds (a hang guard)."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "never true"
        time.sleep(0.05)
