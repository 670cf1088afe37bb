"""One rank of a 2-process gloo job that checkpoints sharded state (test helper).

``python sharded_worker.py RANK WORLD PORT DIR``: every rank saves a replicated model plus
a tensor sharded across ranks (a DTensor) through CheckpointManager (which routes to DCP
when the world size is > 1), then loads the newest checkpoint back and checks it. Rank 0
also writes the expected full tensors to DIR/expected.pt for the test to compare.

``python sharded_worker.py RANK WORLD PORT DIR full-disk``: saves that fail for want of
space, once in rank 1's shards and once in rank 0's manifest, must raise on every rank and
leave nothing behind; the saves around them must still load, and a checkpoint that fails
to verify on one rank must be skipped by both.

``python sharded_worker.py RANK WORLD PORT DIR late-failure``: a save whose last sync fails
on rank 0 after the manifest was written raises on every rank, but its checkpoint, complete,
is kept and loads.

``python sharded_worker.py RANK WORLD PORT DIR two-runs``: a run saves steps 1 and 2, then a
new run (a manager that resumed nothing) saves step 10, all sharded, into DIR/ckpt; the test
tears the new run's checkpoint.

``python sharded_worker.py RANK WORLD PORT DIR retention-failure``: the retention after save 2
fails on rank 0 (listing the directory): the save raises on both ranks, and step 2 is kept
(before, it raised on rank 0 alone, while rank 1 waited in the save's last barrier; a rank
left waiting in a collective fails after 30 s here).
"""

from __future__ import annotations

import errno
import os
import sys
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor
from train_helpers import exit_now

from danlu.core.errors import DataError
from danlu.train.checkpoint import CheckpointManager


def saved_steps(root: str) -> list[int]:
    """The steps of the checkpoint directories in ``root``. Only those: the other rank's
    CheckpointManager may be creating its write probe there (``.danlu-write-probe-...``),
    whose name is no step."""
    return sorted(int(n.split("-")[1]) for n in os.listdir(root) if n.startswith("ckpt-"))


def no_space(*args: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def full_disk(rank: int, directory: str) -> int:
    """Saves 1 and 4 succeed; 2 fails writing rank 1's shards, 3 writing rank 0's manifest."""
    from torch.distributed.checkpoint import filesystem

    root = os.path.join(directory, "ckpt")
    mgr = CheckpointManager(root, keep_last=3, sharded=True)
    writer = filesystem.FileSystemWriter.write_data
    manifest = CheckpointManager._write_manifest
    for step in (1, 2, 3, 4):
        if step == 2 and rank == 1:
            filesystem.FileSystemWriter.write_data = no_space  # type: ignore[method-assign]
        if step == 3:
            filesystem.FileSystemWriter.write_data = writer  # type: ignore[method-assign]
            if rank == 0:
                CheckpointManager._write_manifest = no_space  # type: ignore[method-assign]
        if step == 4:
            CheckpointManager._write_manifest = manifest  # type: ignore[method-assign]
        try:
            mgr.save(step, {"w": torch.full((4,), float(step)), "step": step})
        except BaseException as exc:  # DCP's CheckpointException is a BaseException
            assert step in (2, 3), f"step {step}: {exc!r}"
            notes = " ".join(getattr(exc, "__notes__", []))
            assert "no space left in" in notes, f"rank {rank} step {step}: {exc!r} {notes!r}"
        else:
            assert step in (1, 4), f"step {step} saved on rank {rank}"
        dist.barrier()
        steps = saved_steps(root)
        assert steps == [s for s in (1, 4) if s <= step], f"rank {rank} after {step}: {steps}"
    step, loaded = mgr.load_latest()  # type: ignore[misc]
    assert step == 4 and torch.equal(loaded["w"], torch.full((4,), 4.0))
    # Step 4 unreadable on rank 1 alone: both ranks fall back to step 1 together.
    verified = CheckpointManager._verify_file  # a sharded checkpoint's files' check
    if rank == 1:

        def unreadable(self: CheckpointManager, info: Any, fname: str) -> None:
            if info.step == 4:
                raise DataError(f"{fname}: checksum does not match")
            verified(self, info, fname)

        CheckpointManager._verify_file = unreadable  # type: ignore[method-assign]
    step, loaded = mgr.load_latest()  # type: ignore[misc]
    assert step == 1 and torch.equal(loaded["w"], torch.full((4,), 1.0)), (rank, step)
    return 0


def late_failure(rank: int, directory: str) -> int:
    """Save 1 succeeds; save 2 fails on rank 0 syncing the directory after its manifest."""
    root = os.path.join(directory, "ckpt")
    mgr = CheckpointManager(root, keep_last=3, sharded=True)
    mgr.save(1, {"w": torch.full((4,), 1.0), "step": 1})
    if rank == 0:
        synced = mgr.storage.sync_dir

        def failing(path: str) -> None:
            if path == mgr.storage.root:  # the last step of the commit
                raise OSError(errno.EIO, "Input/output error")
            synced(path)

        mgr.storage.sync_dir = failing  # type: ignore[method-assign]
    try:
        mgr.save(2, {"w": torch.full((4,), 2.0), "step": 2})
    except OSError as exc:
        assert exc.errno == errno.EIO, f"rank {rank}: {exc!r}"
    else:
        raise AssertionError(f"rank {rank}: the save of step 2 did not fail")
    dist.barrier()
    steps = saved_steps(root)
    assert steps == [1, 2], f"rank {rank}: {steps}"
    step, loaded = CheckpointManager(root, sharded=True).load_latest()  # type: ignore[misc]
    assert step == 2 and torch.equal(loaded["w"], torch.full((4,), 2.0)), (rank, step)
    return 0


def two_runs(rank: int, directory: str) -> int:
    """An older run's sharded steps 1 and 2, then a new run's step 10 (the test tears it)."""
    root = os.path.join(directory, "ckpt")
    old = CheckpointManager(root, keep_last=5, sharded=True)
    for step in (1, 2):
        old.save(step, {"w": torch.full((4,), float(step)), "step": step})
    old.close()
    new = CheckpointManager(root, keep_last=5, sharded=True)
    new.save(10, {"w": torch.full((4,), 10.0), "step": 10})
    new.close()
    assert new.run_id is not None and new.run_id != old.run_id, (rank, new.run_id)
    return 0


def retention_failure(rank: int, directory: str) -> int:
    """Save 1 succeeds; the retention after save 2's commit fails on rank 0."""
    root = os.path.join(directory, "ckpt")
    mgr = CheckpointManager(root, keep_last=1, sharded=True)
    mgr.save(1, {"w": torch.full((4,), 1.0), "step": 1})
    if rank == 0:
        mgr._retain = no_stale_listing  # type: ignore[method-assign]
    try:
        mgr.save(2, {"w": torch.full((4,), 2.0), "step": 2})
    except OSError as exc:
        assert exc.errno == errno.ESTALE, f"rank {rank}: {exc!r}"
    else:
        raise AssertionError(f"rank {rank}: the save of step 2 did not fail")
    dist.barrier()
    step, loaded = mgr.load_latest()  # type: ignore[misc]
    assert step == 2 and torch.equal(loaded["w"], torch.full((4,), 2.0)), (rank, step)
    return 0


def no_stale_listing(*args: object) -> None:
    raise OSError(errno.ESTALE, "Stale file handle")


def main(rank: int, world: int, port: int, directory: str) -> int:
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)  # same replicated values on every rank
    model = torch.nn.Linear(8, 4)
    full = torch.arange(world * 6, dtype=torch.float32).reshape(world * 3, 2)
    sharded = distribute_tensor(full, mesh, [Shard(0)])
    mgr = CheckpointManager(os.path.join(directory, "ckpt"), keep_last=2, sharded=True)
    for step in (1, 2, 3):
        with torch.no_grad():
            model.weight.add_(1.0)
        state = {
            "model": model.state_dict(),
            "emb": sharded * step,
            "step": step,
            "meta": {"world": world},
        }
        mgr.save(step, state, {"loss": 1.0 / step})
    step, loaded = mgr.load_latest()  # type: ignore[misc]
    assert step == 3 and loaded["meta"] == {"world": world}
    assert torch.equal(loaded["model"]["weight"], model.weight.detach())
    assert torch.equal(loaded["emb"], full * 3)
    assert len(mgr.list_checkpoints()) == 2
    if rank == 0:
        torch.save(
            {"weight": model.weight.detach(), "emb": full * 3},
            os.path.join(directory, "expected.pt"),
        )
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    r, w, p, d = sys.argv[1:5]
    modes = {
        "full-disk": full_disk,
        "late-failure": late_failure,
        "two-runs": two_runs,
        "retention-failure": retention_failure,
    }
    if sys.argv[5:6] and sys.argv[5] in modes:
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{p}",
            rank=int(r),
            world_size=int(w),
            # retention-failure: a rank left waiting in a collective fails soon (the
            # others keep the default, lest a slow start on a busy machine time out)
            timeout=timedelta(seconds=30 if sys.argv[5] == "retention-failure" else 1800),
        )
        code = modes[sys.argv[5]](int(r), d)
        dist.destroy_process_group()
        exit_now(code)
    exit_now(main(int(r), int(w), int(p), d))
