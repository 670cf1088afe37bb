"""A worker whose ``LOCAL_RANK`` has no GPU (more workers on a node than the job's GPUs) is
refused by name before it joins the process group, not with CUDA's "invalid device ordinal"
(here: torch's own error on a CPU build) from deep inside ``set_device``."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from danlu.core.errors import ConfigError
from danlu.train.distributed import Distributed
from danlu.train.env import JobEnv


def _fake_gpus(monkeypatch: pytest.MonkeyPatch, count: int) -> list[object]:
    """Pretend ``count`` GPUs are visible; what would have touched CUDA or the process group
    is recorded instead of run."""
    calls: list[object] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: calls.append(device))
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda *a, **k: calls.append("init"))
    monkeypatch.setattr(dist, "get_rank", lambda: 0)
    monkeypatch.setattr(dist, "get_world_size", lambda: 4)
    return calls


def _env(local_rank: int) -> JobEnv:
    return JobEnv.from_environ(
        {
            "WORLD_SIZE": "4",
            "RANK": str(local_rank),
            "LOCAL_RANK": str(local_rank),
            "LOCAL_WORLD_SIZE": "4",
        }
    )


def test_a_local_rank_beyond_the_visible_gpus_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _fake_gpus(monkeypatch, 2)
    with pytest.raises(ConfigError, match=r"LOCAL_RANK=3 .*2 CUDA device.*nproc-per-node=2"):
        Distributed.from_env(_env(3))
    assert calls == []  # neither the device set nor the group joined


def test_a_local_rank_with_a_gpu_gets_it(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_gpus(monkeypatch, 4)
    d = Distributed.from_env(_env(3))
    assert d.device == torch.device("cuda", 3) and d.local_rank == 3
    assert calls == [torch.device("cuda", 3), "init"]
