"""The in-memory executor: scripted runs on a manual clock, stops, adoption, base helpers."""

from __future__ import annotations

import pytest

from danlu.core.cluster import Allocation, Cluster, GpuShare, Node
from danlu.executors import (
    FakeExecutor,
    FakeWorld,
    GpusBusyError,
    GpuSharingExecutor,
    GpuSlot,
    Handle,
    InvalidLaunchError,
    JobAlreadyRunningError,
    JobLaunch,
    MultiNodeExecutor,
    Outcome,
    StopReason,
    UnknownHandleError,
    classify_exit,
)
from danlu.executors.base import refreshed_cluster
from danlu.executors.supervise import MAX_GRACE_SECONDS


def _job(job_id: str = "j", attempt: int = 0) -> JobLaunch:
    return JobLaunch(job_id, ("python", "train.py"), restart_count=attempt)


def test_scripted_run_on_manual_clock() -> None:
    world = FakeWorld()
    ex = FakeExecutor(Cluster.homogeneous(1, 4), world)
    assert isinstance(ex, MultiNodeExecutor) and isinstance(ex, GpuSharingExecutor)
    world.script("j", duration=10, outcome=Outcome.OOM, log=b"CUDA out of memory")
    handle = ex.submit(_job())
    assert ex.poll(handle).running
    with pytest.raises(JobAlreadyRunningError):
        ex.submit(_job(attempt=1))
    world.clock.advance(10)
    status = ex.poll(handle)
    assert (status.outcome, status.finished_at) == (Outcome.OOM, 10)
    assert ex.logs(handle, 5) == (b"out of memory", 18)
    assert world.launches == [_job()]


def test_preempt_checkpoints_or_is_killed_and_cancel() -> None:
    world = FakeWorld()
    ex = FakeExecutor(Cluster.homogeneous(1, 4), world)
    world.script("ckpt", duration=100, checkpoint_seconds=2)
    world.script("stubborn", duration=100, checkpoint_seconds=None)
    a, b, c = (ex.submit(_job(n)) for n in ("ckpt", "stubborn", "cancel"))
    ex.preempt(a, 5)
    ex.preempt(b, 5)
    ex.cancel(c)
    world.clock.advance(2)
    assert (ex.poll(a).outcome, ex.poll(a).exit_code) == (Outcome.PREEMPTED, 75)
    assert ex.poll(b).running
    assert ex.poll(c).stop_reason is StopReason.CANCEL and ex.poll(c).exit_code == 137
    world.clock.advance(3)
    status = ex.poll(b)
    assert (status.outcome, status.exit_code, status.checkpointed) == (
        Outcome.PREEMPTED,
        137,
        False,
    )


def test_a_cancel_with_a_grace_checkpoints_or_is_killed_as_a_preemption() -> None:
    """As the real executors: with a grace (the control plane's, else the launch's own
    ``preempt_grace``) the run checkpoints within it (exit 75) or is killed when it ends,
    the stop recorded as a cancel; a later cancel without one kills it at once."""
    world = FakeWorld()
    ex = FakeExecutor(Cluster.homogeneous(1, 4), world)
    world.script("ckpt", duration=100, checkpoint_seconds=4)
    world.script("stubborn", duration=100, checkpoint_seconds=None)
    world.script("late", duration=100, checkpoint_seconds=None)
    world.script("own", duration=100, checkpoint_seconds=None)
    a, b, d = (ex.submit(_job(n)) for n in ("ckpt", "stubborn", "late"))
    own = ex.submit(JobLaunch("own", ("python",), preempt_grace=8.0))
    for handle in (a, b, d):
        ex.cancel(handle, 5.0)
    ex.cancel(own, 1.0)
    world.clock.advance(4)
    status = ex.poll(a)
    assert (status.outcome, status.exit_code, status.stop_reason) == (
        Outcome.PREEMPTED,
        75,
        StopReason.CANCEL,
    )
    assert ex.poll(b).running and ex.poll(own).running
    ex.cancel(d)  # a later cancel with the short grace: killed now
    assert (ex.poll(d).exit_code, ex.poll(d).finished_at) == (137, 4)
    world.clock.advance(1)
    status = ex.poll(b)
    assert (status.outcome, status.exit_code, status.stop_reason) == (
        Outcome.FAILED,
        137,
        StopReason.CANCEL,
    )
    assert ex.poll(own).running  # its own 8 s, not the 1 s given
    world.clock.advance(3)
    assert (ex.poll(own).exit_code, ex.poll(own).finished_at) == (137, 8)


@pytest.mark.parametrize("grace", [float("nan"), "5", None])
def test_a_preempt_grace_that_is_not_seconds_is_refused(grace: object) -> None:
    """As the real executors refuse it (``check_grace``), before the run is touched: ``nan``
    was taken, the run marked preempted with a kill time of ``nan``, which never comes (it
    ran on to its scripted end); a string or None raised ``TypeError``."""
    world = FakeWorld()
    ex = FakeExecutor(Cluster.homogeneous(1, 4), world)
    world.script("j", duration=100, checkpoint_seconds=None)
    handle = ex.submit(_job())
    with pytest.raises(InvalidLaunchError, match=r"grace_seconds: .* give a number of seconds"):
        ex.preempt(handle, grace)  # type: ignore[arg-type]
    status = ex.poll(handle)
    assert status.running and status.stop_reason is None
    world.clock.advance(100)
    assert ex.poll(handle).outcome is Outcome.SUCCEEDED


@pytest.mark.parametrize(
    ("grace", "killed_at"),
    [(-5.0, 10.0), (-float("inf"), 10.0), (float("inf"), 10.0 + MAX_GRACE_SECONDS)],
)
def test_a_preempt_grace_is_taken_as_the_real_executors_take_it(
    grace: float, killed_at: float
) -> None:
    """Below 0 is 0: a SIGKILL at once, not one in the past (the run ended 5 s before it was
    preempted); an endless grace is the real executors' longest."""
    world = FakeWorld()
    ex = FakeExecutor(Cluster.homogeneous(1, 4), world)
    world.script("j", duration=2e9, checkpoint_seconds=None)
    handle = ex.submit(_job())
    world.clock.advance(10)
    ex.preempt(handle, grace)
    world.clock.advance(killed_at - 10.0)
    status = ex.poll(handle)
    assert (status.outcome, status.exit_code, status.finished_at) == (
        Outcome.PREEMPTED,
        137,
        killed_at,
    )


@pytest.mark.parametrize(("own", "ended"), [(None, (137, 10.0)), (60.0, (75, 30.0))])
def test_a_launchs_own_preempt_grace_overrides_the_one_given(
    own: float | None, ended: tuple[int, float]
) -> None:
    """As the real executors do (``JobLaunch.preempt_grace``): a job that asked for 60 s
    and checkpoints in 30 s is not killed at the 10 s it is preempted with."""
    world = FakeWorld()
    ex = FakeExecutor(Cluster.homogeneous(1, 1), world)
    world.script("slow", duration=1000, checkpoint_seconds=30)
    handle = ex.submit(JobLaunch("slow", ("train",), gpus=(GpuSlot(0, 0),), preempt_grace=own))
    ex.preempt(handle, 10)
    world.clock.advance(31)
    status = ex.poll(handle)
    assert status.outcome is Outcome.PREEMPTED
    assert (status.exit_code, status.finished_at) == ended


def test_a_resumable_run_resumes_from_its_checkpoint() -> None:
    world = FakeWorld()
    ex = FakeExecutor(Cluster.homogeneous(1, 4), world)
    world.script("r", duration=100, checkpoint_seconds=5, resumable=True)
    world.script("plain", duration=100, checkpoint_seconds=5)
    r, plain = ex.submit(_job("r")), ex.submit(_job("plain"))
    world.clock.advance(40)
    ex.preempt(r, 30)  # checkpoints at 45: 45 s of work saved
    ex.preempt(plain, 30)
    world.clock.advance(5)
    assert ex.poll(r).outcome is Outcome.PREEMPTED and world.saved == {"r": 45.0}
    r = ex.submit(_job("r", 1))
    plain = ex.submit(_job("plain", 1))
    world.clock.advance(55)  # the rest of its 100 s; the plain run starts over
    assert ex.poll(r).outcome is Outcome.SUCCEEDED and ex.poll(plain).running
    # a run killed before its checkpoint saves nothing: the next resumes from the last one
    world.script("k", duration=100, checkpoint_seconds=50, resumable=True)
    k = ex.submit(_job("k"))
    world.clock.advance(10)
    ex.preempt(k, 20)
    world.clock.advance(20)
    assert ex.poll(k).exit_code == 137 and "k" not in world.saved
    k = ex.submit(_job("k", 1))
    world.clock.advance(99)
    assert ex.poll(k).running


def test_adopt_from_a_new_instance_and_forget() -> None:
    world = FakeWorld()
    handle = FakeExecutor(Cluster.homogeneous(1, 1), world).submit(_job())
    again = FakeExecutor(Cluster.homogeneous(1, 1), world)
    assert again.adopt() == [handle]
    again.forget(handle)
    with pytest.raises(UnknownHandleError):
        again.poll(handle)
    with pytest.raises(UnknownHandleError):
        again.poll(Handle("j", 3))


def test_slots_from_allocation_and_memory_limit() -> None:
    alloc = Allocation((GpuShare(0, 1, 1000, 80), GpuShare(0, 2, 500, 30)))
    slots = JobLaunch.slots(alloc)
    assert slots == (GpuSlot(0, 1, None), GpuSlot(0, 2, 30))
    assert JobLaunch("x", ("a",), gpus=slots).memory_limit == 30
    assert JobLaunch("x", ("a",), gpus=JobLaunch.slots(alloc, shared_memory=True)).nodes == (0,)


TORCHRUN_STOPPED = (
    "preemption requested: checkpointing at step 121 and exiting with 75\n"
    "torch.distributed.elastic.multiprocessing.api.SignalException: Process 349 got signal: 15\n"
)


@pytest.mark.parametrize(
    ("code", "tail", "stop", "outcome"),
    [
        (0, "", None, Outcome.SUCCEEDED),
        (75, "", None, Outcome.PREEMPTED),
        (1, "", None, Outcome.FAILED),
        (1, "torch.OutOfMemoryError: CUDA out of memory.", None, Outcome.OOM),
        (137, "Out of memory: Killed process 123", None, Outcome.OOM),
        (137, "", None, Outcome.FAILED),
        (137, "", StopReason.PREEMPT, Outcome.PREEMPTED),
        (143, "", StopReason.CANCEL, Outcome.FAILED),
        # torchrun's agent ends on the preemption's SIGTERM with 1 once its workers checkpointed
        (1, TORCHRUN_STOPPED, StopReason.PREEMPT, Outcome.PREEMPTED),
        (1, TORCHRUN_STOPPED, None, Outcome.FAILED),  # not a stop danlu asked for
        (1, TORCHRUN_STOPPED.replace(": 15", ": 2"), StopReason.PREEMPT, Outcome.FAILED),
        (1, "", StopReason.PREEMPT, Outcome.FAILED),
        (None, "", None, Outcome.FAILED),
    ],
)
def test_classify_exit(
    code: int | None, tail: str, stop: StopReason | None, outcome: Outcome
) -> None:
    assert classify_exit(code, tail, stop) is outcome


def test_a_launch_waits_for_a_stopping_run_on_its_gpus() -> None:
    world = FakeWorld()
    ex = FakeExecutor(Cluster.homogeneous(1, 4), world)
    world.script("old", duration=1000, checkpoint_seconds=30)
    on = (GpuSlot(0, 1), GpuSlot(0, 2))
    old = ex.submit(JobLaunch("old", ("python", "train.py"), gpus=on))
    new = JobLaunch("new", ("python", "train.py"), gpus=(GpuSlot(0, 2),))
    beside = JobLaunch("beside", ("python", "train.py"), gpus=(GpuSlot(0, 3),))
    ex.preempt(old, 60)  # it checkpoints for 30 s, on GPUs the control plane counts free
    with pytest.raises(GpusBusyError, match=r"0/2 .* held by job old"):
        ex.submit(new)
    ex.submit(beside)  # other GPUs: no wait
    world.clock.advance(30)
    assert not ex.poll(old).running
    ex.submit(new)
    assert [launch.job_id for launch in world.launches] == ["old", "beside", "new"]


def test_refreshed_cluster_keeps_the_nodes_that_stay_in_their_order() -> None:
    old = Cluster((Node("a", 2), Node("b", 2), Node("c", 2)))
    read = [Node("d", 4), Node("c", 8), Node("a", 2)]
    assert [(n.name, n.gpus) for n in refreshed_cluster(old, read, "x").nodes] == [
        ("a", 2),
        ("c", 8),
        ("d", 4),
    ]
    assert [n.name for n in refreshed_cluster(None, read, "x").nodes] == ["d", "c", "a"]


def test_after_a_refresh_live_runs_hold_their_gpus_by_node_name() -> None:
    world = FakeWorld()
    ex = FakeExecutor(Cluster((Node("a", 2), Node("b", 2))), world)
    world.script("on-b", duration=1000)
    ex.submit(JobLaunch("on-b", ("python", "train.py"), gpus=(GpuSlot(1, 0),)))
    world.cluster = Cluster((Node("b", 2), Node("c", 2)))
    assert [n.name for n in ex.refresh_inventory().nodes] == ["b", "c"]
    with pytest.raises(GpusBusyError, match="held by job on-b"):  # b is node 0 now
        ex.submit(JobLaunch("new", ("python", "train.py"), gpus=(GpuSlot(0, 0),)))
    ex.submit(JobLaunch("on-c", ("python", "train.py"), gpus=(GpuSlot(1, 0),)))
