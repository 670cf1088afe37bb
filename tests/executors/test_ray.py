"""The Ray executor against a real Ray cluster (``ray_cluster``): inventory, placement and
environment on one and two nodes, exits, preemption with and without a checkpoint,
cancellation, a gang whose one node fails or checkpoints alone, busy GPUs, adoption by a new
instance, an actor that dies."""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ray_cluster import NODES, ray_cluster
from run_helpers import ENV_DUMP, GANG_CHECKPOINT, envs, launch, wait, wait_text

from danlu.executors import (
    GpusBusyError,
    GpuSlot,
    JobAlreadyRunningError,
    JobLaunch,
    Outcome,
    StopReason,
)

SRC = str(Path(__file__).resolve().parents[2] / "src")

# One Ray cluster at a time: under pytest-xdist these modules share one worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    with ray_cluster() as started:
        yield started


def executor(state: Path, **kwargs: Any) -> Any:
    from danlu.executors.ray_executor import RayExecutor

    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": SRC, "RAY_X": "1"}
    return RayExecutor(
        state,
        address=None,
        namespace="danlu-test",
        base_env=base,
        api_url="http://127.0.0.1:8080",
        cancel_grace=1.0,
        **kwargs,
    )


@pytest.fixture
def ex(cluster: Any, tmp_path: Path) -> Any:
    return executor(tmp_path / "state")


def test_inventory_lists_the_nodes_with_gpus(ex: Any) -> None:
    cluster = ex.inventory()
    assert sorted(n.name for n in cluster.nodes) == list(NODES)
    assert [n.gpus for n in cluster.nodes] == [4, 4]
    assert ex.max_nodes_per_job() == 2


def test_job_runs_on_its_gpus_with_the_job_environment(ex: Any, tmp_path: Path) -> None:
    node = [n.name for n in ex.inventory().nodes].index("n2")
    job = launch(
        "env-1",
        ENV_DUMP,
        env={
            "DANLU_HPARAMS": '{"lr": 0.1}',  # a sweep trial's own
            "MY_VAR": "a b; $(touch /tmp/x)",
            "DANLU_JOB_ID": "x",
            "RAY_ADDRESS": "elsewhere",
        },
        gpus=(GpuSlot(node, 1), GpuSlot(node, 3)),
        checkpoint_dir=str(tmp_path / "ckpt"),
        token="secret",
        batch_size=64,
    )
    handle = ex.submit(job)
    status = wait(ex, handle)
    assert status.outcome is Outcome.SUCCEEDED and status.exit_code == 0, status
    (env,) = envs(ex.logs(handle)[0].decode())
    assert env["CUDA_VISIBLE_DEVICES"] == "1,3"
    assert env["MY_VAR"] == "a b; $(touch /tmp/x)"
    assert env["DANLU_JOB_ID"] == "env-1" and env["DANLU_TOKEN"] == "secret"
    assert env["DANLU_HPARAMS"] == '{"lr": 0.1}'
    assert env["DANLU_BATCH_SIZE"] == "32"
    assert "RAY_ADDRESS" not in env and "RAY_X" not in env
    assert env["PET_NNODES"] == "1" and env["PET_NPROC_PER_NODE"] == "2"


def test_a_job_across_two_nodes_gets_each_nodes_gpus(ex: Any) -> None:
    job = launch("multi-1", ENV_DUMP, gpus=(GpuSlot(0, 0), GpuSlot(0, 2), GpuSlot(1, 3)))
    handle = ex.submit(job)
    assert wait(ex, handle).outcome is Outcome.SUCCEEDED
    by_rank = {e["PET_NODE_RANK"]: e for e in envs(ex.logs(handle)[0].decode())}
    assert by_rank["0"]["CUDA_VISIBLE_DEVICES"] == "0,2"
    assert by_rank["1"]["CUDA_VISIBLE_DEVICES"] == "3"
    assert {e["PET_NNODES"] for e in by_rank.values()} == {"2"}
    assert len({e["PET_MASTER_PORT"] for e in by_rank.values()}) == 1


def test_exit_codes_are_classified(ex: Any) -> None:
    failed = ex.submit(launch("fail-1", "import sys; sys.exit(3)", gpus=(GpuSlot(0, 0),)))
    oom = ex.submit(
        launch(
            "oom-1",
            "import sys; print('torch.OutOfMemoryError: CUDA out of memory'); sys.exit(1)",
            gpus=(GpuSlot(0, 1),),
        )
    )
    status = wait(ex, failed)
    assert status.outcome is Outcome.FAILED and status.exit_code == 3
    assert wait(ex, oom).outcome is Outcome.OOM
    missing = ex.submit(JobLaunch("missing-1", ("/no/such/program",), gpus=(GpuSlot(0, 2),)))
    status = wait(ex, missing)
    assert status.outcome is Outcome.FAILED and status.exit_code == 127
    assert "cannot start '/no/such/program'" in ex.logs(missing)[0].decode()


def test_preemption_lets_the_job_checkpoint_on_every_node(ex: Any) -> None:
    """One node checkpoints at once and exits 75; the other takes longer than the cancel
    grace. The first one's exit made every poll stop the gang with the cancel's grace: the
    slow node got a SIGTERM per poll and was killed in the middle of its checkpoint."""
    handle = ex.submit(launch("pre-1", GANG_CHECKPOINT, gpus=(GpuSlot(0, 0), GpuSlot(1, 0))))
    wait_text(ex, handle, "ready", count=2)
    ex.preempt(handle, grace_seconds=20)
    status = wait(ex, handle)
    assert status.outcome is Outcome.PREEMPTED and status.checkpointed, status
    assert status.stop_reason is StopReason.PREEMPT
    assert ex.logs(handle)[0].decode().count("checkpointed after 1 SIGTERM") == 2


def test_a_job_ignoring_sigterm_is_killed_after_the_grace_and_a_cancel_fails_it(
    ex: Any,
) -> None:
    """The node of rank 1 checkpoints (exit 75) but the other ignores the SIGTERM and is
    killed: the run did not checkpoint (it was reported as the 75 that came first)."""
    code = (
        "import os, signal, sys, time\n"
        "checkpoint = lambda *_: sys.exit(75)\n"
        "rank1 = os.environ['PET_NODE_RANK'] == '1'\n"
        "signal.signal(signal.SIGTERM, checkpoint if rank1 else signal.SIG_IGN)\n"
        "print('ready', flush=True); time.sleep(60)\n"
    )
    handle = ex.submit(launch("stubborn-1", code, gpus=(GpuSlot(0, 2), GpuSlot(1, 2))))
    wait_text(ex, handle, "ready", count=2)
    ex.preempt(handle, grace_seconds=1.0)
    status = wait(ex, handle)
    assert status.outcome is Outcome.PREEMPTED and not status.checkpointed
    assert (status.exit_code, status.signal) == (137, 9)
    cancelled = ex.submit(launch("cancel-1", "import time; time.sleep(60)", gpus=(GpuSlot(0, 2),)))
    ex.cancel(cancelled)
    status = wait(ex, cancelled)
    assert status.outcome is Outcome.FAILED and status.stop_reason is StopReason.CANCEL


def test_when_one_node_fails_the_others_are_stopped(ex: Any, tmp_path: Path) -> None:
    """Once, not at every poll; and the failed node's last line, which has no newline, is
    not joined to the next node's output in the job's log."""
    ready = tmp_path / "ready"
    code = (
        "import os, pathlib, signal, sys, time\n"
        f"ready = pathlib.Path({str(ready)!r})\n"
        "if os.environ['PET_NODE_RANK'] == '1':\n"
        "    while not ready.exists(): time.sleep(0.05)\n"
        "    sys.stdout.write('rank 1 fails'); sys.exit(5)\n"
        "terms = []\n"
        "signal.signal(signal.SIGTERM, lambda *_: terms.append(1))\n"
        "ready.touch()\n"
        "while not terms: time.sleep(0.05)\n"
        "time.sleep(0.6)  # the control plane polls meanwhile\n"
        "print('stopped by', len(terms), 'SIGTERM', flush=True); sys.exit(1)\n"
    )
    handle = ex.submit(launch("gang-1", code, gpus=(GpuSlot(0, 3), GpuSlot(1, 3))))
    status = wait(ex, handle, timeout=30)
    assert status.outcome is Outcome.FAILED and status.exit_code == 5
    lines = ex.logs(handle)[0].decode().splitlines()
    assert "rank 1 fails" in lines and "stopped by 1 SIGTERM" in lines, lines


def test_when_one_node_checkpoints_by_itself_the_others_checkpoint_too(
    cluster: Any, tmp_path: Path
) -> None:
    """The node of rank 1 exits 75 with no stop of the run under way (its host SIGTERMed it
    alone): the other node was never stopped, the run went on a member short. It is stopped
    once, with the job's own preemption grace: its checkpoint takes longer than the cancel
    grace and the executor's preemption grace."""
    ex = executor(tmp_path / "state", preempt_grace=0.5)
    ready = tmp_path / "ready"
    code = (
        "import os, pathlib, signal, sys, time\n"
        f"ready = pathlib.Path({str(ready)!r})\n"
        "if os.environ['PET_NODE_RANK'] == '1':\n"
        "    while not ready.exists(): time.sleep(0.05)\n"
        "    print('rank 1 checkpointed alone', flush=True); sys.exit(75)\n"
        "terms = []\n"
        "signal.signal(signal.SIGTERM, lambda *_: terms.append(1))\n"
        "ready.touch()\n"
        "end = time.monotonic() + 40\n"
        "while not terms and time.monotonic() < end: time.sleep(0.05)\n"
        "if not terms: sys.exit(1)\n"
        "time.sleep(1.5)  # writing its checkpoint: longer than the cancel grace\n"
        "print('rank 0 checkpointed after', len(terms), 'SIGTERM', flush=True); sys.exit(75)\n"
    )
    job = launch("alone-1", code, gpus=(GpuSlot(0, 1), GpuSlot(1, 1)), preempt_grace=20)
    handle = ex.submit(job)
    try:
        status = wait(ex, handle, timeout=20)
    finally:
        ex.cancel(handle)
    assert status.outcome is Outcome.PREEMPTED and status.checkpointed, status
    assert status.stop_reason is None
    lines = ex.logs(handle)[0].decode().splitlines()
    assert "rank 1 checkpointed alone" in lines
    assert "rank 0 checkpointed after 1 SIGTERM" in lines, lines


def test_busy_gpus_and_a_second_run_are_refused(ex: Any) -> None:
    code = "import time; print('ready', flush=True); time.sleep(60)"
    handle = ex.submit(launch("hold-1", code, gpus=(GpuSlot(1, 2),)))
    with pytest.raises(JobAlreadyRunningError):
        ex.submit(launch("hold-1", code, gpus=(GpuSlot(1, 1),), attempt=1))
    with pytest.raises(GpusBusyError):
        ex.submit(launch("other-1", code, gpus=(GpuSlot(1, 2),)))
    ex.cancel(handle)
    assert wait(ex, handle).stop_reason is StopReason.CANCEL


def test_a_new_instance_adopts_the_runs(cluster: Any, tmp_path: Path) -> None:
    first = executor(tmp_path / "state")
    code = "import time; print('ready', flush=True); time.sleep(1.5); print('done')"
    handle = first.submit(launch("adopt-1", code, gpus=(GpuSlot(0, 1),)))
    wait_text(first, handle, "ready")
    second = executor(tmp_path / "state")
    assert second.adopt() == [handle]
    status = wait(second, handle)
    assert status.outcome is Outcome.SUCCEEDED
    assert second.logs(handle)[0].decode().split() == ["ready", "done"]
    second.forget(handle)
    assert second.adopt() == []


def _text(path: Path) -> str:
    """The text of ``path``; empty when it cannot be read (gone, not made yet)."""
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def test_an_ended_run_leaves_no_output_folder_on_its_nodes(ex: Any, tmp_path: Path) -> None:
    """Each node's part of a run keeps its output in a temporary folder; the folder went
    with neither the run nor its actor, one per run on every node for good."""
    go = tmp_path / "go"
    ready = f"ready-{uuid.uuid4().hex}"  # this run's own line: its folders are those holding it
    code = (
        "import pathlib, time\n"
        f"print({ready!r}, flush=True)\n"
        f"while not pathlib.Path({str(go)!r}).exists(): time.sleep(0.05)\n"
        "print('ok')\n"
    )
    before = set(Path(tempfile.gettempdir()).glob("danlu-run-*"))
    handle = ex.submit(launch("tidy-1", code, gpus=(GpuSlot(0, 0), GpuSlot(1, 0))))
    wait_text(ex, handle, ready, count=2)
    # tests on other workers make folders of the same prefix meanwhile: only this run's count
    made = {
        folder
        for folder in set(Path(tempfile.gettempdir()).glob("danlu-run-*")) - before
        if ready in _text(folder / "output.log")
    }
    assert len(made) == 2  # a folder per node (both nodes of the test cluster are here)
    go.touch()
    assert wait(ex, handle).outcome is Outcome.SUCCEEDED
    assert sorted(ex.logs(handle)[0].decode().split()) == ["ok", "ok", ready, ready]
    assert not any(folder.exists() for folder in made)


def test_a_run_whose_actor_dies_is_re_queued_as_preempted(ex: Any) -> None:
    import ray

    code = "import time; print('ready', flush=True); time.sleep(60)  # lost-marker"
    handle = ex.submit(launch("lost-1", code, gpus=(GpuSlot(1, 0),)))
    wait_text(ex, handle, "ready")
    ray.kill(ray.get_actor("danlu.lost-1.0.0", namespace="danlu-test"), no_restart=True)
    status = wait(ex, handle)
    assert status.outcome is Outcome.PREEMPTED and "gone" in status.message
    assert status.node_lost and status.exit_code is None
    deadline = time.monotonic() + 10  # the job's process ends with its actor
    while any(b"lost-marker" in line for line in _cmdlines()):
        assert time.monotonic() < deadline, "the job outlived its actor"
        time.sleep(0.1)


def _cmdlines() -> list[bytes]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                out.append((entry / "cmdline").read_bytes())
            except OSError:  # exited meanwhile
                continue
    return out


def test_a_refresh_takes_in_a_node_that_joined_and_drops_one_that_left(
    cluster: Any, ex: Any
) -> None:
    assert [n.name for n in ex.refresh_inventory().nodes] == [n.name for n in ex.inventory().nodes]
    joined = cluster.add_node(num_cpus=1, num_gpus=2, labels={"danlu.node": "n3"})
    try:
        cluster.wait_for_nodes()
        nodes = ex.refresh_inventory().nodes
        assert [n.name for n in nodes][-1] == "n3" and nodes[-1].gpus == 2
        handle = ex.submit(launch("joined-1", ENV_DUMP, gpus=(GpuSlot(len(nodes) - 1, 1),)))
        assert wait(ex, handle).outcome is Outcome.SUCCEEDED
        (env,) = envs(ex.logs(handle)[0].decode())
        assert env["CUDA_VISIBLE_DEVICES"] == "1"
    finally:
        cluster.remove_node(joined)
    deadline = time.monotonic() + 30  # Ray marks the node dead once its raylet is gone
    while "n3" in [n.name for n in ex.refresh_inventory().nodes]:
        assert time.monotonic() < deadline, "n3 stayed in the inventory after it left"
        time.sleep(0.5)
    assert sorted(n.name for n in ex.inventory().nodes) == list(NODES)
