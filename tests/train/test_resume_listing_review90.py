"""A rank whose search for the newest checkpoint fails (its listing of the directory refused,
a manifest read failing there alone) fails every rank at once, saying which rank and why:
before, it raised alone and the others waited at the ranks' gather until the collective
timeout (300 s by default), then failed on a timeout naming nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from train_helpers import run_worker_ranks

from danlu.core.errors import DataError
from danlu.train.checkpoint import CheckpointManager
from danlu.train.ckpt import Checkpoints

HERE = Path(__file__).resolve().parent


def _one_checkpoint(directory: Path) -> None:
    with CheckpointManager(str(directory)) as mgr:
        mgr.save(1, {"w": torch.ones(2)})


def test_a_rank_whose_search_fails_still_joins_the_gather(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _one_checkpoint(tmp_path)
    given: list[object] = []

    def gather(mine: object) -> list[object]:
        given.append(mine)
        return ["ckpt-000000000001-00000000", mine]

    ckpt = Checkpoints(str(tmp_path), gather=gather)

    def refused() -> None:
        raise PermissionError(13, "Permission denied", str(tmp_path))

    monkeypatch.setattr(ckpt._manager, "load_latest", refused)
    with pytest.raises(PermissionError):  # this rank's own error, as before
        ckpt.load_latest()
    assert len(given) == 1  # it joined the one gather the other ranks wait in
    assert isinstance(given[0], dict) and "PermissionError" in str(given[0]["failed"])


def test_the_other_ranks_fail_naming_the_rank_and_its_error(tmp_path: Path) -> None:
    _one_checkpoint(tmp_path)
    calls: list[object] = []

    def gather(mine: object) -> list[object]:  # rank 0 failed, this is rank 1
        calls.append(mine)
        return [{"failed": "PermissionError: [Errno 13] Permission denied"}, mine]

    ckpt = Checkpoints(str(tmp_path), gather=gather)
    with pytest.raises(DataError, match=r"rank 0: PermissionError") as raised:
        ckpt.load_latest()
    assert "failed on another rank" in str(raised.value)
    assert len(calls) == 1  # no second gather: the failed rank is not in it


def test_ranks_that_agree_resume_as_before(tmp_path: Path) -> None:
    _one_checkpoint(tmp_path)
    ckpt = Checkpoints(str(tmp_path), gather=lambda mine: [mine, mine])
    found = ckpt.load_latest()
    assert found is not None and found[0] == 1


@pytest.mark.slow
def test_two_gloo_ranks_fail_together_without_waiting_for_the_timeout(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    _one_checkpoint(directory)
    out = tmp_path / "seen"
    run_worker_ranks(
        HERE / "listing_worker.py",
        2,
        [str(directory), str(out)],
        timeout=120,
        GLOO_SOCKET_IFNAME="lo",
        CUDA_VISIBLE_DEVICES="",
    )
    seen = [json.loads(Path(f"{out}.{rank}").read_text()) for rank in (0, 1)]
    assert seen[1]["error"] == "PermissionError"
    # before: a collective timeout after 30 s (a RuntimeError naming no rank)
    assert seen[0]["error"] == "DataError"
    assert "rank 1: PermissionError" in seen[0]["message"]
