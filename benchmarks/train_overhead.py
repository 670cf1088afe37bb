"""Overhead of danlu.train: steps/s of a plain PyTorch loop vs the same loop under danlu.train.

danlu.train runs with its defaults: metrics on (every step, shipped to a JSONL file by the
background thread), gradient norm computed every step for anomaly detection (action "skip"),
LR control, OOM guard; checkpoints off. The two loops alternate (A B A B ...) on identical
batches so machine noise hits both; the figure is the median over repeats of
``danlu_steps_per_s / plain_steps_per_s``.

    PYTHONPATH=src python benchmarks/train_overhead.py [--repeats 9] [--steps 30] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

import danlu.train as dt


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(512, 1024),
        torch.nn.ReLU(),
        torch.nn.Linear(1024, 1024),
        torch.nn.ReLU(),
        torch.nn.Linear(1024, 10),
    )


def loss_fn(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return torch.nn.functional.cross_entropy(model(x), y)


def plain(batches: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    t0 = time.perf_counter()
    for batch in batches:
        loss = loss_fn(model, batch)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return len(batches) / (time.perf_counter() - t0)


def under_danlu(batches: list[tuple[torch.Tensor, torch.Tensor]], metrics: Path) -> float:
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    with dt.init(
        model,
        opt,
        global_batch_size=batches[0][0].shape[0],
        metrics_file=metrics,
        progress=False,
        environ={},
    ) as ctx:
        t0 = time.perf_counter()
        for batch in batches:
            ctx.step(batch, loss_fn)
        rate = len(batches) / (time.perf_counter() - t0)
    return rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    batches = [
        (
            torch.randn(args.batch, 512, generator=g),
            torch.randint(0, 10, (args.batch,), generator=g),
        )
        for _ in range(args.steps)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        metrics = Path(tmp) / "metrics.jsonl"
        plain(batches[:5])
        under_danlu(batches[:5], metrics)  # warm up both paths
        ratios, p_rates, d_rates = [], [], []
        for i in range(args.repeats):
            if i % 2 == 0:
                p, d = plain(batches), under_danlu(batches, metrics)
            else:
                d, p = under_danlu(batches, metrics), plain(batches)
            p_rates.append(p)
            d_rates.append(d)
            ratios.append(d / p)
        lines = sum(1 for _ in metrics.open())
    ratio = statistics.median(ratios)
    print(
        f"plain loop      : {statistics.median(p_rates):8.2f} steps/s (median of "
        f"{args.repeats} x {args.steps} steps, batch {args.batch})"
    )
    print(f"under danlu     : {statistics.median(d_rates):8.2f} steps/s")
    print(
        f"ratio danlu/plain (median of per-repeat ratios): {ratio:.4f}  "
        f"overhead {100 * (1 - ratio):+.2f}%  (target <= 1%)"
    )
    print(f"metric records written: {lines}")


if __name__ == "__main__":
    main()
