"""OOM recovery under DDP when only ONE rank runs out of memory: one 2-rank gloo job of
``oom_ddp_worker.py`` (run once for the module) trains every case of :data:`CASES`.

The healthy rank ran the last micro-batch's forward outside ``no_sync``, learnt from the
agreement that a peer had failed and returned without the backward: DDP's reducer stayed
prepared for an all-reduce, and on the retry the first micro-batch's backward (under
``no_sync``) started a gradient all-reduce while the peer sent its one-float OOM flag (gloo:
"op.preamble.length <= op.nbytes ... collective mismatch", SIGABRT; or a hang). Now every
rank drops that prepared all-reduce before the retry, wherever the OOM struck.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from train_helpers import run_worker_ranks

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

HERE = Path(__file__).resolve().parent
WORLD = 2

CASES = [
    "mlp-first-1",
    "mlp-middle-1",
    "mlp-last-1",
    "mlp-loss-1",
    "mlp-last-0",
    "bn-middle-0",
    "bn-loss-1",
]
"""``MODEL-WHERE-OOM_RANK``: the model, where in step 1 the OOM strikes (the first, middle or
last micro-batch's forward, or the last one's loss after DDP's forward returned) and the rank
that runs out of memory; see the worker."""


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Run the worker on :data:`WORLD` CPU ranks; each rank's JSON result."""
    out = tmp_path_factory.mktemp("oom_ddp") / "result"
    run_worker_ranks(
        HERE / "oom_ddp_worker.py",
        WORLD,
        [str(out), *CASES],
        timeout=180,
        GLOO_SOCKET_IFNAME="lo",
        CUDA_VISIBLE_DEVICES="",
    )
    return [json.loads(Path(f"{out}.{rank}").read_text()) for rank in range(WORLD)]


@pytest.mark.parametrize("case", CASES, ids=CASES)
def test_one_rank_oom_under_ddp_retries_on_every_rank(ranks: list[Any], case: str) -> None:
    """Both ranks retry the step at half the micro-batch (4 -> 2) and go on; they end with
    equal parameters, those of a run that halved the micro-batch before that step."""
    runs = [rank[case] for rank in ranks]
    for run in runs:
        assert run["oom"]["micro"] == [4, 2, 2]
        assert run["oom"]["oom_count"] == [0, 1, 1]
        assert run["reference"]["micro"] == [4, 2, 2]
    assert runs[1]["oom"]["params"] == runs[0]["oom"]["params"]  # the ranks did not part
    for run in runs:
        for part in ("params", "buffers"):
            got, expected = run["oom"][part], run["reference"][part]
            assert got.keys() == expected.keys()
            for key, value in got.items():
                assert value == pytest.approx(expected[key], rel=1e-5, abs=1e-6), (part, key)
