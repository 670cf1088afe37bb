"""The Slurm executor against a real Slurm cluster (``slurm_cluster``): inventory, placement
and environment on one and two nodes, exits, preemption with and without a checkpoint,
cancellation, busy GPUs, adoption by a new instance, nodes Slurm reports down."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time
from pathlib import Path

import pytest
from run_helpers import ENV_DUMP, GANG_CHECKPOINT, envs, launch, wait, wait_text
from slurm_cluster import GPUS_PER_NODE, NODES, SlurmCluster

from danlu.executors import (
    GpusBusyError,
    GpuSlot,
    Handle,
    JobAlreadyRunningError,
    NodeLaunchError,
    Outcome,
    StopReason,
)
from danlu.executors.slurm import SlurmExecutor
from danlu.executors.slurmctl import SlurmCommands

SRC = str(Path(__file__).resolve().parents[2] / "src")

# One Slurm cluster at a time: under pytest-xdist these modules share one worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]


def executor(slurm: SlurmCluster, state: Path, **kwargs: object) -> SlurmExecutor:
    base = {"PATH": slurm.env["PATH"], "PYTHONPATH": SRC, "SLURM_JOB_ID": "leaked"}
    return SlurmExecutor(
        SlurmCommands(slurm.env),
        state,
        partition="gpu",
        base_env=base,
        api_url="http://127.0.0.1:8080",
        cancel_grace=1.0,
        poll_interval=0.0,
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.fixture
def ex(slurm: SlurmCluster, tmp_path: Path) -> SlurmExecutor:
    return executor(slurm, tmp_path / "state")


def test_inventory_lists_the_partitions_nodes_and_gpus(ex: SlurmExecutor) -> None:
    cluster = ex.inventory()
    assert [n.name for n in cluster.nodes] == list(NODES)
    assert [n.gpus for n in cluster.nodes] == [GPUS_PER_NODE] * len(NODES)
    assert cluster.nodes[0].cpu_milli == 2000 and cluster.nodes[0].memory == 1000 * 2**20
    assert ex.max_nodes_per_job() == 2


def test_job_runs_on_its_gpus_with_the_job_environment(ex: SlurmExecutor, tmp_path: Path) -> None:
    job = launch(
        "env-1",
        ENV_DUMP,
        env={
            "DANLU_HPARAMS": '{"lr": 0.1}',  # a sweep trial's own
            "MY_VAR": "a b; $(touch /tmp/x)",
            "SBATCH_PARTITION": "other",
            "DANLU_JOB_ID": "x",
        },
        gpus=(GpuSlot(1, 1), GpuSlot(1, 3)),
        checkpoint_dir=str(tmp_path / "ckpt"),
        token="secret",
        batch_size=64,
    )
    handle = ex.submit(job)
    status = wait(ex, handle)
    assert status.outcome is Outcome.SUCCEEDED and status.exit_code == 0, status
    (env,) = envs(ex.logs(handle)[0].decode())
    assert env["SLURMD_NODENAME"] == "n2"
    assert env["CUDA_VISIBLE_DEVICES"] == "1,3"
    assert env["MY_VAR"] == "a b; $(touch /tmp/x)"  # passed as is, no shell
    assert env["DANLU_JOB_ID"] == "env-1" and env["DANLU_TOKEN"] == "secret"
    assert env["DANLU_HPARAMS"] == '{"lr": 0.1}'
    assert env["DANLU_BATCH_SIZE"] == "32" and env["DANLU_GLOBAL_BATCH_SIZE"] == "64"
    assert env["DANLU_CHECKPOINT_DIR"] == str(tmp_path / "ckpt")
    assert env["SLURM_JOB_ID"] != "leaked"  # Slurm's own, not the server's
    assert env["PET_NNODES"] == "1" and env["PET_NPROC_PER_NODE"] == "2"
    assert status.started_at is not None and status.finished_at is not None


def test_a_job_across_two_nodes_gets_each_nodes_gpus_and_torchrun_settings(
    ex: SlurmExecutor,
) -> None:
    job = launch("multi-1", ENV_DUMP, gpus=(GpuSlot(0, 0), GpuSlot(0, 2), GpuSlot(1, 3)))
    handle = ex.submit(job)
    assert wait(ex, handle).outcome is Outcome.SUCCEEDED
    by_node = {e["SLURMD_NODENAME"]: e for e in envs(ex.logs(handle)[0].decode())}
    assert by_node["n1"]["CUDA_VISIBLE_DEVICES"] == "0,2"
    assert by_node["n2"]["CUDA_VISIBLE_DEVICES"] == "3"
    assert {e["PET_NODE_RANK"] for e in by_node.values()} == {"0", "1"}
    assert {e["PET_NNODES"] for e in by_node.values()} == {"2"}
    assert {e["PET_MASTER_ADDR"] for e in by_node.values()} == {"127.0.0.1"}
    assert len({e["PET_MASTER_PORT"] for e in by_node.values()}) == 1


def test_exit_codes_are_classified(ex: SlurmExecutor) -> None:
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


def test_preemption_lets_the_job_checkpoint_on_every_node(ex: SlurmExecutor) -> None:
    """One node checkpoints at once and exits 75; ``srun --kill-on-bad-exit`` then killed
    the other in the middle of its checkpoint."""
    handle = ex.submit(launch("pre-1", GANG_CHECKPOINT, gpus=(GpuSlot(0, 0), GpuSlot(1, 0))))
    deadline = time.monotonic() + 30
    while ex.logs(handle)[0].decode().count("ready") < 2:
        assert time.monotonic() < deadline, ex.logs(handle)
        time.sleep(0.1)
    ex.preempt(handle, grace_seconds=20)
    status = wait(ex, handle)
    assert status.outcome is Outcome.PREEMPTED and status.checkpointed, status
    assert status.stop_reason is StopReason.PREEMPT
    assert ex.logs(handle)[0].decode().count("checkpointed after 1 SIGTERM") == 2


NODE_CHECKPOINT = (
    "import signal, sys, time\n"
    "terms = []\n"
    "signal.signal(signal.SIGTERM, lambda *_: terms.append(1))\n"
    "print('ready', flush=True)\n"
    "while not terms:\n"
    "    time.sleep(0.05)\n"
    "time.sleep(2.0)  # writing its checkpoint: longer than the test cluster's KillWait (1 s)\n"
    "print('checkpointed after', len(terms), 'SIGTERM', flush=True)\n"
    "sys.exit(75)\n"
)
"""Checkpoints on SIGTERM in 2 s, then exits 75; prints how many SIGTERMs it got."""


def node_task(run_dir: Path, node: str) -> tuple[int, list[int]]:
    """The pid of the run's task on ``node`` (the test nodes share this host) and the pids
    of its children (the job's command)."""
    task, parents = 0, {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            env = (entry / "environ").read_bytes().split(b"\0")
            stat = (entry / "stat").read_bytes()
        except OSError:
            continue
        parents[int(entry.name)] = int(stat[stat.rindex(b")") + 2 :].split()[1])
        named = any(a.endswith(b"slurm_task.py") for a in argv) and str(run_dir).encode() in argv
        if named and f"SLURMD_NODENAME={node}".encode() in env:
            task = int(entry.name)
    assert task, f"no task of {run_dir} on {node}"
    return task, [pid for pid, parent in parents.items() if parent == task]


@pytest.mark.parametrize("whom", ["command", "node"])
def test_a_checkpoint_on_one_node_stops_the_others_with_the_jobs_grace(
    ex: SlurmExecutor, tmp_path: Path, whom: str
) -> None:
    """A SIGTERM from outside danlu on n1 alone (a ``kill`` of the command; a shutdown of
    the node, which signals its task too) makes n1 checkpoint and exit 75. n2 must then be
    stopped as for a preemption, with the job's grace, and checkpoint too. Before: with the
    command alone signalled, ``srun --kill-on-bad-exit`` killed n2 after Slurm's KillWait, in
    the middle of its checkpoint; with the task signalled too, its exit 0 left n2 running,
    a member short, for ever."""
    job = launch("lone-1", NODE_CHECKPOINT, gpus=(GpuSlot(0, 0), GpuSlot(1, 0)), preempt_grace=20)
    handle = ex.submit(job)
    try:
        wait_text(ex, handle, "ready", count=2, timeout=30)
        task, children = node_task(tmp_path / "state" / "runs" / "lone-1", "n1")
        assert children, "the command of n1 is not running"
        for pid in [*children, task] if whom == "node" else children:
            os.kill(pid, signal.SIGTERM)
        status = wait(ex, handle, timeout=30)
        log = ex.logs(handle)[0].decode()
        assert log.count("checkpointed after 1 SIGTERM") == 2, log
        assert status.outcome is Outcome.PREEMPTED and status.checkpointed, status
        assert status.stop_reason is None  # danlu asked for no stop
        record = json.loads((tmp_path / "state" / "runs" / "lone-1" / "launch.json").read_text())
        assert record["gang_grace"] == 20  # the job's preemption grace, not Slurm's KillWait
    finally:
        if ex.poll(handle).running:
            ex.cancel(handle)
            wait(ex, handle)


def test_a_job_ignoring_sigterm_is_killed_after_the_grace(ex: SlurmExecutor) -> None:
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(60)"
    )
    handle = ex.submit(launch("stubborn-1", code, gpus=(GpuSlot(0, 2),)))
    wait_text(ex, handle, "ready")
    ex.preempt(handle, grace_seconds=1.0)
    status = wait(ex, handle)
    assert status.outcome is Outcome.PREEMPTED and not status.checkpointed


def test_a_cancelled_job_ends_failed(ex: SlurmExecutor) -> None:
    code = "import time; print('ready', flush=True); time.sleep(60)"
    cancelled = ex.submit(launch("cancel-1", code, gpus=(GpuSlot(0, 2),)))
    wait_text(ex, cancelled, "ready")
    ex.cancel(cancelled)
    status = wait(ex, cancelled)
    assert status.outcome is Outcome.FAILED and status.stop_reason is StopReason.CANCEL
    assert (status.exit_code, status.signal) == (128 + 15, 15)  # died of the SIGTERM


def test_busy_gpus_and_a_second_run_are_refused(ex: SlurmExecutor) -> None:
    code = "import time; print('ready', flush=True); time.sleep(60)"
    handle = ex.submit(launch("hold-1", code, gpus=(GpuSlot(1, 2),)))
    with pytest.raises(JobAlreadyRunningError):
        ex.submit(launch("hold-1", code, gpus=(GpuSlot(1, 1),), attempt=1))
    with pytest.raises(GpusBusyError):
        ex.submit(launch("other-1", code, gpus=(GpuSlot(1, 2),)))
    shared = ex.submit(launch("share-1", ENV_DUMP, gpus=(GpuSlot(1, 1, 2**30),)))
    assert wait(ex, shared).outcome is Outcome.SUCCEEDED
    (env,) = envs(ex.logs(shared)[0].decode())
    assert env["DANLU_GPU_MEMORY_LIMIT"] == str(2**30)
    ex.cancel(handle)
    assert wait(ex, handle).stop_reason is StopReason.CANCEL


def test_a_new_instance_adopts_the_runs(slurm: SlurmCluster, tmp_path: Path) -> None:
    first = executor(slurm, tmp_path / "state")
    code = "import time; print('ready', flush=True); time.sleep(1.5); print('done')"
    handle = first.submit(launch("adopt-1", code, gpus=(GpuSlot(0, 3),)))
    wait_text(first, handle, "ready")
    second = executor(slurm, tmp_path / "state")
    assert second.adopt() == [handle]
    status = wait(second, handle)
    assert status.outcome is Outcome.SUCCEEDED
    assert "done" in second.logs(handle)[0].decode()
    second.forget(handle)
    assert second.adopt() == []


def test_the_exit_the_tasks_recorded_is_used_once_slurm_forgot_the_job(
    slurm: SlurmCluster, ex: SlurmExecutor, tmp_path: Path
) -> None:
    """Polled by a new instance (a control plane that restarted), which asks Slurm of this
    job alone: ``squeue -j`` of only unknown ids fails, which was taken for an error."""
    handle = ex.submit(launch("forgot-1", "import sys; sys.exit(4)", gpus=(GpuSlot(0, 1),)))
    run_dir = tmp_path / "state" / "runs" / "forgot-1"
    deadline = time.monotonic() + 30
    while not (run_dir / "exit-n1.json").exists():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    launch_record = json.loads((run_dir / "launch.json").read_text())
    launch_record["slurm_id"] = 999_999  # a job id Slurm does not know
    (run_dir / "launch.json").write_text(json.dumps(launch_record))
    status = wait(executor(slurm, tmp_path / "state"), handle)
    assert status.outcome is Outcome.FAILED and status.exit_code == 4


def test_a_node_slurm_reports_down_refuses_the_launch(
    slurm: SlurmCluster, ex: SlurmExecutor
) -> None:
    assert ex.closed_nodes() == {}
    slurm.run("scontrol", "update", "NodeName=n2", "State=DRAIN", "Reason=bad fan")
    try:
        ex.refresh_inventory()  # what the control plane closes: Slurm's state and reason
        closed = ex.closed_nodes()
        assert list(closed) == ["n2"] and "DRAIN" in closed["n2"], closed
        assert closed["n2"].startswith("Slurm reports it ") and closed["n2"].endswith(": bad fan")
        with pytest.raises(NodeLaunchError, match="n2"):
            ex.submit(launch("drained-1", "print(1)", gpus=(GpuSlot(1, 0),)))
        handle = ex.submit(launch("fine-1", "print(1)", gpus=(GpuSlot(0, 0),)))
        assert wait(ex, handle).outcome is Outcome.SUCCEEDED
    finally:
        slurm.run("scontrol", "update", "NodeName=n2", "State=RESUME")
        deadline = time.monotonic() + 60  # back in service, answering (not "idle*")
        while slurm.run("sinfo", "-h", "-N", "-n", "n2", "-o", "%T").strip() != "idle":
            assert time.monotonic() < deadline, slurm.run("scontrol", "show", "node", "n2")
            time.sleep(0.2)
    ex.refresh_inventory()
    assert ex.closed_nodes() == {}


def test_the_admins_sbatch_options_come_first_and_the_runs_win(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    ex = executor(
        slurm, tmp_path / "state", sbatch_options=("--comment=from-admin", "--nodelist=n1")
    )
    handle = ex.submit(launch("opts-1", ENV_DUMP, gpus=(GpuSlot(1, 0),)))
    assert wait(ex, handle).outcome is Outcome.SUCCEEDED
    (env,) = envs(ex.logs(handle)[0].decode())
    assert env["SLURMD_NODENAME"] == "n2"  # where danlu placed it, not the admin's node list
    shown = slurm.run("scontrol", "show", "job", "--oneliner", env["SLURM_JOB_ID"])
    assert "Comment=from-admin" in shown


def test_a_jobs_path_does_not_choose_the_slurm_commands(ex: SlurmExecutor, tmp_path: Path) -> None:
    """``sbatch`` runs with the job's environment; a ``PATH`` there named a program of the
    submitter's that the control plane then ran as ``sbatch``, on its own host."""
    evil = tmp_path / "evil"
    evil.mkdir()
    marker = tmp_path / "ran"
    for name in ("sbatch", "srun"):
        fake = evil / name
        fake.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
        fake.chmod(0o755)
    job = launch("path-1", "print('real run')", env={"PATH": f"{evil}:/usr/bin:/bin"})
    handle = ex.submit(job)
    assert wait(ex, handle).outcome is Outcome.SUCCEEDED
    assert "real run" in ex.logs(handle)[0].decode() and not marker.exists()


def test_the_jobs_environment_never_reaches_sbatch(slurm: SlurmCluster, tmp_path: Path) -> None:
    """sbatch runs on the control plane's host: the job's variables (an ``LD_PRELOAD`` of
    the submitter's) must not act there. They reach the job through the run's task file; the
    token, kept off disk, alone through sbatch."""
    wrappers = tmp_path / "bin"
    wrappers.mkdir()
    seen = tmp_path / "sbatch.env"
    for name in ("sbatch", "squeue", "scontrol", "scancel", "sinfo", "srun"):
        real = shutil.which(name) or f"/usr/bin/{name}"
        dump = f"env > {seen}\n" if name == "sbatch" else ""
        (wrappers / name).write_text(f'#!/bin/sh\n{dump}exec {real} "$@"\n')
        (wrappers / name).chmod(0o755)
    ex = SlurmExecutor(
        SlurmCommands(slurm.env, bin_dir=str(wrappers)),
        tmp_path / "state",
        partition="gpu",
        base_env={"PATH": slurm.env["PATH"], "PYTHONPATH": SRC},
        poll_interval=0.0,
    )
    job = launch("env-2", ENV_DUMP, env={"MY_VAR": "mine", "LD_PRELOAD": ""}, token="secret")
    handle = ex.submit(job)
    assert wait(ex, handle).outcome is Outcome.SUCCEEDED
    (env,) = envs(ex.logs(handle)[0].decode())
    assert env["MY_VAR"] == "mine" and env["DANLU_TOKEN"] == "secret"
    submitted = dict(line.split("=", 1) for line in seen.read_text().splitlines() if "=" in line)
    assert "MY_VAR" not in submitted and "LD_PRELOAD" not in submitted
    assert submitted["DANLU_TOKEN"] == "secret"
    task = json.loads((tmp_path / "state" / "runs" / "env-2" / "task.json").read_text())
    assert task["env"]["MY_VAR"] == "mine" and "DANLU_TOKEN" not in task["env"]


def test_a_refresh_follows_the_partition_and_keeps_live_runs_gpus(
    slurm: SlurmCluster, ex: SlurmExecutor
) -> None:
    code = "import time; print('ready', flush=True); time.sleep(60)"
    handle = ex.submit(launch("moved-1", code, gpus=(GpuSlot(1, 2),)))  # n2, GPU 2
    wait_text(ex, handle, "ready")
    slurm.run("scontrol", "update", "PartitionName=gpu", "Nodes=n2")
    try:
        assert [n.name for n in ex.refresh_inventory().nodes] == ["n2"]
        assert [n.name for n in ex.inventory().nodes] == ["n2"]
        # n2 is node 0 now: its GPU 2 is still the live run's
        with pytest.raises(GpusBusyError, match="moved-1"):
            ex.submit(launch("other-2", code, gpus=(GpuSlot(0, 2),)))
        beside = ex.submit(launch("beside-1", ENV_DUMP, gpus=(GpuSlot(0, 1),)))
        assert wait(ex, beside).outcome is Outcome.SUCCEEDED
        (env,) = envs(ex.logs(beside)[0].decode())
        assert env["SLURMD_NODENAME"] == "n2" and env["CUDA_VISIBLE_DEVICES"] == "1"
    finally:
        slurm.run("scontrol", "update", "PartitionName=gpu", f"Nodes={','.join(NODES)}")
    assert [n.name for n in ex.refresh_inventory().nodes] == ["n2", "n1"]  # n1 comes after
    ex.cancel(handle)
    assert wait(ex, handle).stop_reason is StopReason.CANCEL
    # danlu's node order is not Slurm's now: rank 0 is where PET_MASTER_ADDR points, the
    # run's first node (n2), not Slurm's first (SLURM_NODEID 0: n1)
    both = ex.submit(launch("ranks-1", ENV_DUMP, gpus=(GpuSlot(0, 0), GpuSlot(1, 0))))
    assert wait(ex, both).outcome is Outcome.SUCCEEDED
    ranks = {e["SLURMD_NODENAME"]: e["PET_NODE_RANK"] for e in envs(ex.logs(both)[0].decode())}
    assert ranks == {"n2": "0", "n1": "1"}


def test_a_launch_onto_a_node_taken_out_of_the_partition_is_a_node_fault(
    slurm: SlurmCluster, ex: SlurmExecutor
) -> None:
    assert [n.name for n in ex.inventory().nodes] == list(NODES)
    slurm.run("scontrol", "update", "PartitionName=gpu", "Nodes=n1")
    try:  # not read again yet: n2 is still node 1 of the inventory
        with pytest.raises(NodeLaunchError, match="n2 is no longer in partition gpu") as raised:
            ex.submit(launch("gone-1", "print(1)", gpus=(GpuSlot(1, 0),)))
        assert raised.value.nodes == ("n2",)
    finally:
        slurm.run("scontrol", "update", "PartitionName=gpu", f"Nodes={','.join(NODES)}")


def _requeue(slurm: SlurmCluster) -> str:
    """Requeue the one job Slurm has, as an admin would (danlu submits ``--no-requeue``, so
    its requeue flag is set first), and return its id."""
    (job,) = slurm.run("squeue", "-h", "-o", "%i").split()
    slurm.run("scontrol", "update", f"JobId={job}", "Requeue=1")
    slurm.run("scontrol", "requeue", job)
    return job


def _wait_pending(ex: SlurmExecutor, handle: Handle, slurm: SlurmCluster) -> None:
    """Poll until Slurm reports the run's job ``PENDING`` again (the executor polls as it
    goes: it must see the run waiting again)."""
    deadline = time.monotonic() + 30
    while "PENDING" not in slurm.run("squeue", "-h", "-o", "%T"):
        assert ex.poll(handle).running and time.monotonic() < deadline
        time.sleep(0.2)
    assert ex.poll(handle).running


def test_a_run_requeued_after_it_ran_is_cancelled_past_the_pending_limit(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    """Slurm keeps a requeued job PENDING (``BeginTime``: its requeue delay, 120 s here): its
    wait counts from when it is seen waiting again, not from its submission."""
    ex = executor(slurm, tmp_path / "state", pending_limit=5.0)  # Slurm starts it sooner
    code = "import time; print('ready', flush=True); time.sleep(60)"
    handle = ex.submit(launch("requeue-1", code, gpus=(GpuSlot(0, 3),)))
    wait_text(ex, handle, "ready")
    time.sleep(5.5)  # longer than the limit since the submission: must not count
    job = _requeue(slurm)
    _wait_pending(ex, handle, slurm)
    status = wait(ex, handle)
    assert status.outcome is Outcome.FAILED and status.exit_code is None
    # 5 s (the limit), or a little more when the poll that saw it came late (a loaded host)
    kept = re.search(
        rf"Slurm kept job {job} PENDING \(BeginTime\) (\d+) s after it was first seen PENDING ",
        status.message or "",
    )
    assert kept is not None and 5 <= int(kept.group(1)) <= 30, status.message
    assert "again after it ran (requeued)" in (status.message or "")
    assert slurm.run("squeue", "-h", "-o", "%i") == ""  # cancelled


def test_a_run_requeued_and_started_again_ends_with_its_new_runs_exit(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    """The first run is killed by the requeue (exit 143 recorded by its node), the second
    exits 4: the run ends with 4, not with the first run's exit."""
    ex = executor(slurm, tmp_path / "state", pending_limit=None)
    marker = tmp_path / "ran-once"
    code = (
        f"import os, sys, time; first = not os.path.exists({str(marker)!r}); "
        f"open({str(marker)!r}, 'a').close(); print('ready', flush=True); "
        "time.sleep(60 if first else 0); sys.exit(0 if first else 4)"
    )
    handle = ex.submit(launch("requeue-2", code, gpus=(GpuSlot(0, 3),)))
    wait_text(ex, handle, "ready")
    job = _requeue(slurm)
    _wait_pending(ex, handle, slurm)
    # not Slurm's requeue delay (120 s) but a few seconds: slurmd kills a job started again
    # within the second its credential was revoked ("Job credential revoked")
    slurm.run("scontrol", "update", f"JobId={job}", "StartTime=now+3")
    status = wait(ex, handle)
    assert (status.outcome, status.exit_code) == (Outcome.FAILED, 4), status
    log = ex.logs(handle)[0].decode()
    assert log.count("ready") == 2 and "DUE TO JOB REQUEUE" in log


def test_a_run_without_its_launch_record_holds_the_gpus_of_its_slurm_jobs_node(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    first = executor(slurm, tmp_path / "state")
    code = "import time; print('ready', flush=True); time.sleep(60)"
    handle = first.submit(launch("lost-1", code, gpus=(GpuSlot(1, 0),)))
    wait_text(first, handle, "ready")
    slurm_id = first._load(handle)[1]["slurm_id"]
    assert first._commands.jobs([slurm_id])[slurm_id].name == "danlu.lost-1.0"
    (first._runs / "lost-1" / "launch.json").unlink()
    second = executor(slurm, tmp_path / "state")  # reads the runs from their records
    try:
        with pytest.raises(GpusBusyError, match="held by job lost-1"):
            second.submit(launch("other-1", "pass", gpus=(GpuSlot(1, 3),)))
        other = second.submit(launch("other-2", "print('ok')", gpus=(GpuSlot(0, 0),)))
        assert wait(second, other).outcome is Outcome.SUCCEEDED
    finally:
        slurm.run("scancel", str(slurm_id))
