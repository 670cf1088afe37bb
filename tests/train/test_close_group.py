"""A distributed rank leaves when its training context goes while the process group's
worker thread is still finishing a collective (real gloo processes).

Before, the DDP wrapper's C++ Reducer held the group's last reference after
``ctx.close()``; freeing the wrapper (the context dropped at the script's end) destroyed the
group holding the GIL, the group waited for its worker thread, and the worker waited for
the GIL to free a collective's tensor: the rank hung for ever after its work was done.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from train_helpers import run_worker_ranks

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

WORKER = Path(__file__).resolve().parent / "close_group_worker.py"


def test_a_rank_leaves_when_its_group_goes_with_a_collective_finishing() -> None:
    outcome = run_worker_ranks(
        WORKER, 2, [], timeout=120, GLOO_SOCKET_IFNAME="lo", CUDA_VISIBLE_DEVICES=""
    )
    for rank, (_, err) in enumerate(outcome):
        assert "left main" in err, f"rank {rank}: {err[-3000:]}"
