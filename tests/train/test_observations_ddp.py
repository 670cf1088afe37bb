"""``sync_time_s`` under DDP: a 2-process gloo job (``sync_worker.py``), on CPU and, where
one is visible, on a GPU (CUDA timing events)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from train_helpers import run_worker_ranks

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

HERE = Path(__file__).resolve().parent
EVERY = 10
"""``goodput_worker.py``'s decision interval: its first decision is after step 10."""


def _run_two_ranks(out: Path, *, cuda: bool, script: str = "sync_worker.py") -> None:
    env = {"GLOO_SOCKET_IFNAME": "lo"}
    if not cuda:
        env["CUDA_VISIBLE_DEVICES"] = ""
    run_worker_ranks(HERE / script, 2, [str(out)], timeout=120, **env)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_ddp_records_carry_sync_time_only_with_accumulation(tmp_path: Path, device: str) -> None:
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA GPU available")
    _run_two_ranks(tmp_path / "records.json", cuda=device == "cuda")
    by_micro: dict[str, list[dict[str, object]]] = json.loads(
        (tmp_path / "records.json").read_text()
    )
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


def test_ddp_ranks_take_the_chief_s_goodput_batch(tmp_path: Path) -> None:
    """Every rank trains at the batch the chief's tuner picks (broadcast): a rank that took its
    own pick would run another number of micro-steps, and DDP would hang or diverge."""
    out = tmp_path / "goodput.json"
    _run_two_ranks(out, cuda=False, script="goodput_worker.py")
    chief = json.loads(Path(f"{out}.0").read_text())
    other = json.loads(Path(f"{out}.1").read_text())
    assert chief["batches"] == other["batches"]
    assert chief["accumulations"] == other["accumulations"]
    # one micro-batch per step, so the first 20 steps probe the sync with two; from the first
    # decision (step 10) on, a batch the tuner picks may accumulate (3 micro-batches of 16 when
    # the measured sync favours 96 samples: a loaded machine's timings): no probe is needed
    # then, and none of those steps runs as one micro-batch
    assert chief["accumulations"][:EVERY] == [2] * EVERY
    assert all(a >= 2 for a in chief["accumulations"][EVERY:20]), chief["accumulations"]
    assert chief["choice"] is not None  # it measured sync and noise: it decided
    assert chief["batches"][-1] == chief["choice"]  # step 60 was a decision step
    assert 32 <= chief["choice"] <= 512


def test_ddp_ranks_take_the_same_anomaly_batch_and_checkpoint_decisions(tmp_path: Path) -> None:
    """What one rank sees must not decide for it alone: a loss spike on one rank (it skipped
    the step, the other applied it, and their parameters parted), each rank's own gradient-noise
    estimate (they chose different batches and learning rates), and each rank's clock for
    ``checkpoint_every_seconds`` (rank 1 entered a checkpoint's collectives alone: a hang)."""
    out = tmp_path / "agree.json"
    _run_two_ranks(out, cuda=False, script="agree_worker.py")
    chief = json.loads(Path(f"{out}.0").read_text())
    other = json.loads(Path(f"{out}.1").read_text())
    skipped = [step for kind, step in chief["anomaly"]["steps"] if kind is not None]
    assert len(skipped) == 1 and chief["anomaly"]["steps"] == other["anomaly"]["steps"]
    assert chief["anomaly"]["weights"] == other["anomaly"]["weights"]
    batches = [batch for batch, _ in chief["gns"]["trace"]]
    assert len(batches) == 30 and max(batches) > 8  # the estimate grew the batch
    assert chief["gns"] == other["gns"]
    assert chief["seconds"]["steps"] == other["seconds"]["steps"] == 16
    assert chief["seconds"]["saved"] == other["seconds"]["saved"]
    assert len(chief["seconds"]["saved"]) >= 2
