"""Batches, buffers and random streams under DDP: one 3-rank gloo job
(``ddp_batch_worker.py``, run once for the module) on batch normalisation's per-rank running
statistics with checkpoints, on a global batch that does not divide by the world size, and on
each rank's RNG state across a resume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from train_helpers import mse_loss, run_worker_ranks

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

import danlu.train as dt  # noqa: E402

HERE = Path(__file__).resolve().parent


WORLD = 3


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Run the worker on :data:`WORLD` CPU ranks; each rank's JSON result."""
    out = tmp_path_factory.mktemp("ddp_batches") / "result"
    run_worker_ranks(
        HERE / "ddp_batch_worker.py",
        WORLD,
        [str(out)],
        timeout=180,
        GLOO_SOCKET_IFNAME="lo",
        CUDA_VISIBLE_DEVICES="",
    )
    return [json.loads(Path(f"{out}.{rank}").read_text()) for rank in range(WORLD)]


def test_batch_norm_checkpoints_under_ddp_and_resumes_exactly(ranks: list[Any]) -> None:
    """The ranks' running statistics differ after every step (each follows its own samples):
    the consistency check before the first checkpoint raised on every rank. Now every rank
    takes rank 0's buffers before a checkpoint, so the run resumed from it ends where the
    uninterrupted one does, on every rank, with DDP's ``broadcast_buffers`` on or off."""
    assert "error" not in ranks[0]["bn"], ranks[0]["bn"]
    for broadcast in ("True", "False"):
        chief = ranks[0]["bn"][broadcast]["straight"]
        for rank in ranks:
            for run in ("straight", "resumed"):
                state = rank["bn"][broadcast][run]
                # within rounding: DDP re-buckets its gradients after a first step, and with
                # 3 ranks the all-reduce's order of summation follows the buckets
                assert state.keys() == chief.keys()
                for key, value in state.items():
                    assert value == pytest.approx(chief[key], rel=1e-6, abs=1e-7), (broadcast, key)


def test_each_step_takes_exactly_the_global_batch_when_it_does_not_divide(
    ranks: list[Any],
) -> None:
    """A global batch of 8 on 3 ranks trained 3 samples a rank, 9 a step (an epoch of 24
    took 3 steps of 9 and a last of 6). Now the ranks take 3, 3 and 2 of each window of 8,
    and the weighting keeps the gradient the mean over those 8: the run ends where one
    process training on the same batches of 8 does."""
    assert "error" not in ranks[0]["uneven"], ranks[0]["uneven"]
    for rank, share in zip(ranks, (3, 3, 2), strict=True):
        assert rank["uneven"]["steps"] == 3
        assert rank["uneven"]["shares"] == [[share, 8, share]] * 3
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(24, 4, generator=g)
    data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
    ctx = dt.fit(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        data,
        mse_loss,
        global_batch_size=8,
        shuffle=False,
        anomaly=None,
        metrics_file=False,
        progress=False,
        environ={},
    )
    assert ctx.step_num == 3
    for rank in ranks:
        for key, value in model.state_dict().items():
            assert rank["uneven"]["state"][key] == pytest.approx(
                value.double().flatten().tolist(), 1e-6
            )


def test_every_rank_resumes_its_own_random_stream(ranks: list[Any]) -> None:
    """A checkpoint held rank 0's RNG states only and every rank restored them: with a seed
    per rank, or with ranks that draw different amounts (shares of 3, 3 and 2 samples of
    dropout), the resumed run's dropout masks on ranks 1 and 2 were not the uninterrupted
    run's. Now every rank's states are in the checkpoint and each rank takes its own."""
    assert "error" not in ranks[0]["rng"], ranks[0]["rng"]
    for variant in ("per_rank_seed", "same_seed"):
        chief = ranks[0]["rng"][variant]["straight"]
        assert ranks[2]["rng"][variant]["straight"]["draws"] != chief["draws"]  # streams apart
        runs = [rank["rng"][variant] for rank in ranks]
        assert [r["resumed"]["draws"] for r in runs] == [r["straight"]["draws"] for r in runs]
        for run in runs:
            for key, value in run["resumed"]["state"].items():  # within DDP's rounding (above)
                assert value == pytest.approx(chief["state"][key], rel=1e-6, abs=1e-7), key
