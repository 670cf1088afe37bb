"""One rank of a 2-process gloo job (test helper): ``ctx.batches`` without ``dataset_size``
on datasets of different sizes on the ranks, then of one size.

``python lazy_sampler_worker.py RANK WORLD PORT OUT``: writes ``{"differ": error text or
None, "same": [this rank's sample counts per step]}`` as JSON to ``OUT.RANK``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import torch
from train_helpers import exit_now, join_as_rank, mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.core.errors import ConfigError


def _context(environ: dict[str, str]) -> dt.TrainContext:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    return dt.init(model, opt, global_batch_size=8, metrics_file=False, environ=environ)


def main() -> None:
    rank, world, port, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    environ = join_as_rank(rank, world, port)
    torch.distributed.init_process_group("gloo")  # reused by both contexts
    result: dict[str, Any] = {}
    with _context(environ) as ctx:
        try:
            next(iter(ctx.batches(tiny_regression(n=32 - 8 * rank))))
            result["differ"] = None
        except ConfigError as exc:
            result["differ"] = str(exc)
    with _context(environ) as ctx:
        counts = []
        for batch in ctx.batches(tiny_regression(n=24)):
            counts.append(len(batch[0]))
            ctx.step(batch, mse_loss)
        result["same"] = counts
    with open(f"{out}.{rank}", "w") as f:
        json.dump(result, f)
    exit_now(0)


if __name__ == "__main__":
    main()
