"""One rank of a 2-process gloo job whose rank 1 cannot list the checkpoint directory (test
helper for ``test_resume_listing_review90.py``).

``python listing_worker.py RANK WORLD PORT DIR OUT``: joins a gloo group whose collectives
time out after 30 s, makes rank 1's listing of ``DIR`` raise ``PermissionError``, asks
``Checkpoints.load_latest`` on every rank (``gather`` as ``danlu.train.init`` passes it) and
writes ``{"error": type, "message": ...}`` (or ``{"error": null}``) as JSON to ``OUT.RANK``.
"""

from __future__ import annotations

import datetime
import json
import sys

import torch.distributed as dist
from train_helpers import exit_now

from danlu.train.checkpoint.storage import LocalStorage
from danlu.train.ckpt import Checkpoints


def main(rank: int, world: int, port: int, directory: str, out: str) -> int:
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=30),
    )

    def gather(obj: object) -> list[object]:
        answers: list[object] = [None] * world
        dist.all_gather_object(answers, obj)
        return answers

    if rank == 1:

        def refused(self: LocalStorage) -> list[str]:
            raise PermissionError(13, "Permission denied", self.root)

        LocalStorage.list_dirs = refused  # type: ignore[method-assign]
    seen: dict[str, object] = {"error": None}
    try:
        Checkpoints(directory, gather=gather).load_latest()
    except Exception as exc:
        seen = {"error": type(exc).__name__, "message": str(exc)}
    with open(f"{out}.{rank}", "w") as f:
        json.dump(seen, f)
    if seen["error"] is None or "DataError" in str(seen["error"]) or rank == 1:
        dist.barrier()  # both ranks are still in step: leave together
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    exit_now(main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:6]))
