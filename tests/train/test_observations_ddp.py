"""``sync_time_s`` under DDP: a 2-process gloo job (``sync_worker.py``), on CPU and, where
one is visible, on a GPU (CUDA timing events)."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

HERE = Path(__file__).resolve().parent


def _run_two_ranks(out: Path, *, cuda: bool) -> dict[str, list[dict[str, object]]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        GLOO_SOCKET_IFNAME="lo",
        PYTHONPATH=os.pathsep.join(
            [str(HERE.parents[1] / "src"), os.environ.get("PYTHONPATH", "")]
        ),
    )
    if not cuda:
        env["CUDA_VISIBLE_DEVICES"] = ""
    procs = [
        subprocess.Popen(
            [sys.executable, str(HERE / "sync_worker.py"), str(rank), "2", str(port), str(out)],
            env=env,
            stderr=subprocess.PIPE,
        )
        for rank in (0, 1)
    ]
    try:
        for p in procs:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, err.decode()
    finally:  # a failed rank leaves its peer waiting in a collective
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    records: dict[str, list[dict[str, object]]] = json.loads(out.read_text())
    return records


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_ddp_records_carry_sync_time_only_with_accumulation(tmp_path: Path, device: str) -> None:
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA GPU available")
    by_micro = _run_two_ranks(tmp_path / "records.json", cuda=device == "cuda")
    # micro-batch 4 of 8 samples: 2 equal micro-batches; 3: 3, 3 and a smaller last one
    for micro, accumulation in (("4", 2), ("3", 3)):
        records = by_micro[micro]
        assert len(records) == 3
        for r in records:
            assert (r["world_size"], r["accumulation"], r["micro_batch"]) == (
                2,
                accumulation,
                int(micro),
            )
            sync = r["sync_time_s"]
            assert isinstance(sync, float) and math.isfinite(sync) and sync >= 0.0, r
    # one micro-batch: the all-reduce cannot be told from the compute, so no key at all
    single = by_micro["8"]
    assert [r["accumulation"] for r in single] == [1, 1, 1]
    assert not any("sync_time_s" in r for r in single)
