"""Under torchrun/gloo with 2 processes: the logged ``loss`` is the mean over the
step's whole global batch, and a checkpoint resumed on fewer ranks trains the new local batch.

Before, the loss was rank 0's own (the mean over its share): it jumped at a resize though the
training was the same. And the micro-batch of a run that merely followed its local batch
stayed at the old per-rank size after a shrink, even with a larger ``DANLU_BATCH_SIZE``.
One torchrun job of ``resize_loss_worker.py`` (run once for the module) does the distributed
part; the references and the resumes run here, in one process.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from train_helpers import SRC, mse_loss, tiny_model, tiny_regression

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

import danlu.train as dt  # noqa: E402  (after the skip: the module needs torch.distributed)

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
WORLD, UNEVEN, STEPS, SAVED_STEPS = 2, 5, 4, 2  # resize_loss_worker's


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run the worker under torchrun on :data:`WORLD` CPU processes; its output prefix."""
    out = tmp_path_factory.mktemp("resize_loss") / "result"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=1",
        f"--nproc-per-node={WORLD}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        "--max-restarts=0",
        "--monitor-interval=0.2",
        str(HERE / "resize_loss_worker.py"),
        str(out),
    ]
    path = os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])
    env = dict(
        os.environ,
        PYTHONPATH=path,
        OMP_NUM_THREADS="1",
        GLOO_SOCKET_IFNAME="lo",
        CUDA_VISIBLE_DEVICES="",
    )
    done = subprocess.run(argv, env=env, capture_output=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return out


def _rank(job: Path, rank: int) -> dict[str, Any]:
    return dict(json.loads(Path(f"{job}.{rank}").read_text()))


def _reference_losses() -> list[float]:
    """The worker's ``mean`` run in one process (no OOM): the loss over all its samples."""
    data = tiny_regression(64)
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    with dt.init(
        model,
        opt,
        global_batch_size=UNEVEN,
        micro_batch_size=2,
        dataset_size=len(data),
        metrics_file=False,
        progress=False,
        environ={},
    ) as ctx:
        batches = ctx.batches(data)
        losses = [ctx.step(next(batches), mse_loss).loss for _ in range(STEPS)]
        batches.close()
    return losses


def test_the_logged_loss_is_the_mean_over_the_global_batch_on_every_rank(job: Path) -> None:
    """Rank 0's records and every rank's step results carry the loss over all 5 samples of
    each step (3 on rank 0, 2 on rank 1), as one process training them logs it; also on the
    step where rank 1 alone ran out of memory and both ranks retried."""
    ranks = [_rank(job, r)["mean"] for r in range(WORLD)]
    records = ranks[0]["records"]
    assert [r["oom_count"] for r in records] == [1] * STEPS  # rank 1's OOM, retried by both
    assert [r["micro_batch"] for r in records] == [1] * STEPS
    expected = _reference_losses()
    logged = [r["loss"] for r in records]
    assert logged == pytest.approx(expected, rel=1e-5)
    for run in ranks:
        assert run["losses"] == pytest.approx(expected, rel=1e-5)


def _resume(job: Path, name: str, tmp_path: Path, environ: dict[str, str], **kw: Any) -> Any:
    """Resume the worker's checkpoint ``name`` in one process (a copy: the run writes into
    it); its batch after one more step."""
    directory = tmp_path / name
    shutil.copytree(f"{job}.{name}", directory)
    data = tiny_regression(64)
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    with dt.init(
        model,
        opt,
        global_batch_size=12,
        dataset_size=len(data),
        checkpoint_dir=str(directory),
        metrics_file=False,
        progress=False,
        environ=environ,
        **kw,
    ) as ctx:
        assert ctx.step_num == SAVED_STEPS  # resumed
        batches = ctx.batches(data)
        ctx.step(next(batches), mse_loss)
        batches.close()
        return ctx.batch


# (case id, checkpoint, environ, init keywords, expected micro, accumulation)
RESUMES = [
    ("follow", "follow", {}, {}, 12, 1),
    ("follow-batch-size-12", "follow", {"DANLU_BATCH_SIZE": "12"}, {}, 12, 1),
    ("follow-micro-4", "follow", {}, {"micro_batch_size": 4}, 4, 3),
    ("oom", "oom", {}, {}, 3, 4),
    ("oom-batch-size-12", "oom", {"DANLU_BATCH_SIZE": "12"}, {}, 3, 4),
    ("oom-micro-2", "oom", {}, {"micro_batch_size": 2}, 2, 6),
]


@pytest.mark.parametrize(
    ("name", "environ", "kw", "micro", "accumulation"),
    [case[1:] for case in RESUMES],
    ids=[case[0] for case in RESUMES],
)
def test_a_shrink_trains_the_new_local_batch_unless_an_oom_capped_it(
    job: Path,
    tmp_path: Path,
    name: str,
    environ: dict[str, str],
    kw: dict[str, int],
    micro: int,
    accumulation: int,
) -> None:
    """Saved on 2 ranks at global batch 12 (micro 6, or 3 after an OOM), resumed on one:
    the micro-batch is the whole local batch of 12 (or the launch's), and an OOM's cap holds
    over a larger launch micro-batch."""
    batch = _resume(job, name, tmp_path, environ, **kw)
    assert (batch.micro, batch.accumulation) == (micro, accumulation)
