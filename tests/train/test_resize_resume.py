"""A gloo job checkpointed at one world size and resumed at another (2 -> 3), and a rank
that dies in the middle of a step, with real processes (``resize_resume_worker.py``).

docs/train.md, "Elastic runs": the resumed workers re-shard the rest of the epoch (nothing
lost or repeated), the global batch stays fixed, and so the run trains what one process
training the same global batches does: the same LR and loss at every step (the schedule,
warmup and Adam's moments come back from the checkpoint) and the same final parameters; the
metric records' steps go on from the checkpoint's, each once in ``metrics.jsonl``.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from train_helpers import run_worker_ranks, worker_ranks_outcome

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
WORKER = HERE / "resize_resume_worker.py"
N, GLOBAL, EPOCHS = 30, 6, 2  # resize_resume_worker's
STEPS = EPOCHS * N // GLOBAL
TIMEOUT_S = 150
"""Seconds each launch may take (a few on an idle machine): past it, every rank's stderr."""
ENV = {"GLOO_SOCKET_IFNAME": "lo", "CUDA_VISIBLE_DEVICES": "", "DANLU_BATCH_SIZE": ""}


def _launch(world: int, mode: str, directory: Path, out: Path) -> list[dict[str, Any]]:
    """Run the worker on ``world`` ranks, every one exiting 0; each rank's result."""
    directory.mkdir(exist_ok=True)
    run_worker_ranks(WORKER, world, [mode, str(directory), str(out)], timeout=TIMEOUT_S, **ENV)
    return [json.loads(Path(f"{out}.{rank}").read_text()) for rank in range(world)]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The whole run in one process, without a stop."""
    directory = tmp_path_factory.mktemp("reference")
    return _launch(1, "run", directory, directory / "result")[0]


def _training_steps(directory: Path) -> list[int]:
    """The steps of the training records in the directory's ``metrics.jsonl``, in order."""
    lines = (directory / "metrics.jsonl").read_text().splitlines()
    return [r["step"] for r in map(json.loads, lines) if "loss" in r]


def _check_resumed_run(
    reference: dict[str, Any],
    before: list[list[Any]],
    saved_optimizer: dict[str, Any],
    after: list[dict[str, Any]],
    directory: Path,
    saved_step: int,
) -> None:
    """``after`` (each rank's result) resumed from the checkpoint of ``saved_step``, which
    holds ``saved_optimizer`` and the steps ``before`` (``[epoch, step,
    samples]``) committed, trained the rest of the one-process run ``reference``."""
    # every sample once in each epoch, over both runs, none twice, none skipped
    committed = [s for s in before if s[1] <= saved_step] + after[0]["seen"]
    assert [s[1] for s in committed] == list(range(1, STEPS + 1))
    for epoch in range(EPOCHS):
        counts = Counter(i for e, _, seen in committed if e == epoch for i in seen)
        assert sorted(counts) == list(range(N)), f"epoch {epoch}: samples skipped"
        assert set(counts.values()) == {1}, f"epoch {epoch}: samples seen twice"
    # each step's window is the one-process run's (the same samples, another split)
    for mine, theirs in zip(committed, reference["seen"], strict=True):
        assert sorted(mine[2]) == sorted(theirs[2]), mine[1]
    # the optimizer state each resumed rank starts from is the state the run saved
    assert all(rank["start"] == saved_step for rank in after)
    for rank in after:
        assert rank["opt_at_start"] == saved_optimizer
    # the records: global batch fixed, LR and loss the one-process run's, steps going on
    new = [r for r in after[0]["records"] if r["step"] > saved_step]
    assert [r["step"] for r in new] == list(range(saved_step + 1, STEPS + 1))
    assert {r["world_size"] for r in new} == {len(after)}
    assert {r["global_batch"] for r in new} == {GLOBAL}
    expected = reference["records"][saved_step:]
    assert [r["lr"] for r in new] == pytest.approx([r["lr"] for r in expected], rel=1e-12)
    assert [r["loss"] for r in new] == pytest.approx([r["loss"] for r in expected], rel=1e-4)
    assert _training_steps(directory) == list(range(1, STEPS + 1))
    # and it ends where the one-process run does, on every rank
    for rank in after:
        for got, want in zip(rank["params"], reference["params"], strict=True):
            assert got == pytest.approx(want, rel=1e-4, abs=1e-6)


def test_a_resize_from_2_to_3_ranks_resumes_exactly(
    reference: dict[str, Any], tmp_path: Path
) -> None:
    """Trained on 2 ranks to step 3 (mid-epoch), saved, resumed on 3: the run is the
    one-process run, step by step."""
    directory = tmp_path / "ckpt"
    before = _launch(2, "stop:3", directory, tmp_path / "before")
    after = _launch(3, "run", directory, tmp_path / "after")
    _check_resumed_run(reference, before[0]["seen"], before[0]["opt_at_end"], after, directory, 3)


def test_a_rank_that_dies_mid_step_stops_the_other(tmp_path: Path) -> None:
    """Rank 1 of 2 dies inside its loss at step 4, rank 0 waiting for it in the step's
    collectives: rank 0 leaves on its own with an error naming the lost peer (not for ever,
    nor killed at the launch's timeout), and writes no result."""
    directory = tmp_path / "ckpt"
    directory.mkdir()
    out = tmp_path / "crashed"
    outcome = worker_ranks_outcome(
        WORKER, 2, ["crash:4:1", str(directory), str(out)], TIMEOUT_S, **ENV
    )
    (code, err), (victim_code, victim_err) = outcome
    assert victim_code == 3, victim_err[-3000:]
    assert code not in (0, None), err[-3000:]  # failed, and on its own (not killed)
    assert "remote worker" in err or "peer" in err, err[-3000:]
    assert not Path(f"{out}.0").exists()
