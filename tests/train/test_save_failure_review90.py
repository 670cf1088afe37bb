"""A distributed run whose writer (rank 0) fails to write a checkpoint (a full disk) fails on
every rank at once: rank 0 with its own error, the others with an ``OSError`` of the same
errno naming rank 0. Before, rank 0 raised alone and the others waited in the next collective
until the collective timeout (300 s by default), then failed on a timeout naming nothing."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
from train_helpers import run_worker_ranks

HERE = Path(__file__).resolve().parent


@pytest.mark.slow
def test_a_failed_save_on_the_writer_fails_every_rank(tmp_path: Path) -> None:
    out = tmp_path / "seen"
    run_worker_ranks(
        HERE / "save_fail_worker.py",
        2,
        [str(tmp_path / "ckpt"), str(out)],
        timeout=120,
        GLOO_SOCKET_IFNAME="lo",
        CUDA_VISIBLE_DEVICES="",
    )
    seen = [json.loads(Path(f"{out}.{rank}").read_text()) for rank in (0, 1)]
    assert seen[0]["errno"] == errno.ENOSPC  # the writer's own error
    # before: a RuntimeError of the collective timeout, after 30 s
    assert seen[1]["error"] == "OSError" and seen[1]["errno"] == errno.ENOSPC
    assert "rank 0" in seen[1]["message"] and "step 1" in seen[1]["message"]
