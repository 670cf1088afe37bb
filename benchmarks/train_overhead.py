"""Overhead of danlu.train: steps/s of a plain PyTorch loop vs the same loop under danlu.train.

danlu.train runs with its defaults: metrics on (every step, shipped to a JSONL file by the
background thread), anomaly detection (action "skip") on the loss every step and on the
gradient norm at the ``"auto"`` cadence (every step unless the norm costs more than a tenth
of a percent of the step; see ``danlu.train.cadence``), LR control, OOM guard; checkpoints off.
Both loops live for the whole measurement and run in blocks of S steps on the same batches,
alternating plain, danlu, danlu, plain, ... so that the machine's drifts hit both alike; a
repeat is one block of each, and the figure is the median over repeats of
``danlu_steps_per_s / plain_steps_per_s``: the steady state a training run sees. The first
three blocks of each are warm-up (in which ``"auto"`` fixes the cadence of the norm, a
one-time cost of four norms per run).

All loops train one model with one optimizer: the same parameters, gradients and optimizer
state in the same memory, so what differs between the loops is only the code around the
step. With a model each, two identical plain loops differed by up to ~2% for a whole run
(where each model's tensors happened to land in memory), as much as the target and more
than the danlu.train code costs. The model trains a little faster this way; the anomalies
the danlu loop found (and skipped) are printed, so that a skipped step cannot make it look
cheap unnoticed.

Two workloads (``--workloads``):

- ``cnn``: the ResNet-style CNN of ``examples/train_cnn.py`` (two residual blocks) on 3x32x32
  images, batch 64: compute-bound, like most training;
- ``mlp``: a 1.6 M-parameter MLP, batch 128: the stress case for the per-step gradient norm,
  since every parameter is used once per sample, so reading all gradients once more (the norm)
  is large next to the step's arithmetic.
- ``resnet18`` (not in the default list): ``danlu.estimate.zoo.resnet18`` (11 M parameters,
  64x64 images), batch 128: a step of GPU size, for ``--device cuda``, where the two above
  take about a millisecond and the fixed cost per step of danlu.train (one wait for the GPU,
  to bring the loss and norm to the host, and its bookkeeping) is large next to them.

The CPU time per step of both loops (``time.process_time``: all threads of the process, so
background threads count) is printed too, and the cadence of the gradient norm that
``"auto"`` chose.

The process first raises glibc's mmap threshold (``mallopt``; ``--keep-malloc`` leaves it).
By default glibc serves the CNN's multi-MB activations with fresh ``mmap`` calls and
returns them to the kernel on free, so every step page-faults its activations in again:
that cost, ~15% of the step, varies from step to step and made two identical plain loops
differ by ~5% here. The setting applies to every loop of the process alike.

On a shared machine the per-repeat ratios of ~1 s blocks scatter widely: on our 2-core test
machine two identical plain loops measured this way gave per-repeat ratios with a standard
deviation of 7-8% (mlp, 240 repeats), so the median of 81 repeats is only good to about
+-1.3% (95%), as large as the target. The block figure is therefore printed with its 95%
bootstrap interval. A second, much tighter estimate follows: five loops kept alive side by
side and stepped in turn, one step each, the order rotating (a round). Each loop's step time
over the plain loop's step time in the same round is a paired ratio (both steps ran within
~100 ms of each other, so the machine's drifts cancel), and the figure is the median over
rounds, again with its 95% bootstrap interval (about +-0.3% for mlp's 1,500 rounds). A
second plain loop, identical to the first, is the A/A control: its paired ratio is the
instrument's own error in the same run. Two more loops show where the overhead comes from:
the plain loop plus ``danlu.train.step.grad_norm`` before each optimizer step (the one read
of every gradient that anomaly detection needs), and danlu.train with ``grad_norm_every=1``
(the norm on every step, what ``"auto"`` gives up on a memory-bound model to stay within
its budget). Their median step times give the cost per step in microseconds. The summary
line prints both estimates with their intervals and the A/A control.

    PYTHONPATH=src python benchmarks/train_overhead.py [--workloads cnn,mlp] [--threads 1]
        [--repeats R] [--steps S] [--interleaved N] [--keep-malloc] [--device cuda]
        [--batch B]
        (R, S, N: per-workload defaults)
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import danlu.train as dt
from danlu.estimate import zoo
from danlu.train.cadence import NormEvery
from danlu.train.step import grad_norm

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import train_cnn  # the example's model, as a user would write it

Batch = tuple[torch.Tensor, torch.Tensor]

CONTROL = "plain again (A/A control)"
"""A second plain loop, identical to the first: its ratio to it is the instrument's own error."""


def make_mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(512, 1024),
        torch.nn.ReLU(),
        torch.nn.Linear(1024, 1024),
        torch.nn.ReLU(),
        torch.nn.Linear(1024, 10),
    )


def make_cnn() -> torch.nn.Module:
    torch.manual_seed(0)
    model: torch.nn.Module = train_cnn.make_model()
    return model


def make_resnet18() -> torch.nn.Module:
    torch.manual_seed(0)
    model, _, _ = zoo.resnet18()
    return model


@dataclass(frozen=True)
class Workload:
    """A model and its batches, with how long to measure it by default."""

    make_model: Callable[[], torch.nn.Module]
    input_shape: tuple[int, ...]
    batch: int
    repeats: int
    steps: int
    interleaved: int


WORKLOADS = {
    "cnn": Workload(make_cnn, (3, 32, 32), 64, repeats=61, steps=8, interleaved=400),
    "mlp": Workload(make_mlp, (512,), 128, repeats=81, steps=30, interleaved=1500),
    "resnet18": Workload(make_resnet18, (3, 64, 64), 128, repeats=21, steps=8, interleaved=200),
}


def loss_fn(model: torch.nn.Module, batch: Batch) -> torch.Tensor:
    x, y = batch
    return torch.nn.functional.cross_entropy(model(x), y)


def plain_stepper(
    model: torch.nn.Module, opt: torch.optim.Optimizer, with_norm: bool = False
) -> Callable[[Batch], None]:
    """One step of the plain loop on ``model`` with ``opt`` (``with_norm``: plus the gradient
    norm before the optimizer step)."""
    params = list(model.parameters())

    def step(batch: Batch) -> None:
        loss_fn(model, batch).backward()  # type: ignore[no-untyped-call]
        if with_norm:
            grad_norm(params)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def _danlu(
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    batches: list[Batch],
    metrics: Path,
    grad_norm_every: NormEvery = "auto",
) -> dt.TrainContext:
    """danlu.train with its defaults (but ``grad_norm_every``), metrics to ``metrics``, off
    the cluster."""
    return dt.init(
        model,
        opt,
        global_batch_size=batches[0][0].shape[0],
        metrics_file=metrics,
        progress=False,
        grad_norm_every=grad_norm_every,
        environ={},
    )


def sync(batch: Batch) -> None:
    """Wait for the GPU's queued work when ``batch`` lives on a GPU (nothing on the CPU)."""
    if batch[0].is_cuda:
        torch.cuda.synchronize()


def block(step: Callable[[Batch], Any], batches: list[Batch]) -> tuple[float, float]:
    """Wall and CPU seconds of one step per batch of ``batches`` (on a GPU, from an idle GPU
    to the last step's end: the loop may queue work ahead within the block, as a training
    loop does)."""
    sync(batches[0])
    t0, c0 = time.perf_counter(), time.process_time()
    for batch in batches:
        step(batch)
    sync(batches[0])
    return time.perf_counter() - t0, time.process_time() - c0


def median_ci(values: list[float], resamples: int = 1000) -> tuple[float, float, float]:
    """The median of ``values`` and a 95% bootstrap interval for it (percentile method,
    fixed seed: the same values give the same interval)."""
    rng = random.Random(0)
    medians = sorted(
        statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples)
    )
    low, high = medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]
    return statistics.median(values), low, high


def interleaved(
    make_model: Callable[[], torch.nn.Module],
    batches: list[Batch],
    metrics: Path,
    steps: int,
    device: str = "cpu",
) -> tuple[dict[str, tuple[float, float, float, float]], dict[str, int]]:
    """The five loops stepped in turn (one step each, the order rotating): per loop, its
    median seconds per step and the median over rounds of its step time over the plain
    loop's in the same round (a paired ratio: both steps saw the same machine state) with
    its 95% bootstrap interval; and the anomalies the two danlu loops found (and skipped).
    On a GPU each step is timed to its end (a wait for the GPU after it), so the loops'
    queueing ahead is not part of this figure: the blocks measure that."""
    if steps <= 0:
        return {}, {}
    model = make_model().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    ctx = _danlu(model, opt, batches, metrics)
    ctx1 = _danlu(model, opt, batches, metrics.with_suffix(".1.jsonl"), 1)
    steppers: dict[str, Callable[[Batch], Any]] = {
        "plain": plain_stepper(model, opt),
        "danlu": lambda b: ctx.step(b, loss_fn),
        "plain + norm": plain_stepper(model, opt, with_norm=True),
        "danlu, norm every step": lambda b: ctx1.step(b, loss_fn),
        CONTROL: plain_stepper(model, opt),
    }
    times: dict[str, list[float]] = {name: [] for name in steppers}
    names = list(steppers)
    with ctx, ctx1:
        for i in range(steps):
            batch = batches[i % len(batches)]
            k = i % len(names)
            for name in names[k:] + names[:k]:
                sync(batch)
                t0 = time.perf_counter()
                steppers[name](batch)
                sync(batch)
                times[name].append(time.perf_counter() - t0)
    base = times["plain"][10:]
    stats = {
        name: (
            statistics.median(ts[10:]),
            *median_ci([t / p for t, p in zip(ts[10:], base, strict=True)]),
        )
        for name, ts in times.items()
    }
    return stats, anomalies_found(ctx, ctx1)


def anomalies_found(*contexts: dt.TrainContext) -> dict[str, int]:
    """The anomalies (skipped steps) of ``contexts``, summed by kind."""
    found: dict[str, int] = {}
    for ctx in contexts:
        for kind, n in (ctx.anomaly.counts if ctx.anomaly is not None else {}).items():
            found[kind] = found.get(kind, 0) + n
    return found


def measure(name: str, w: Workload, args: argparse.Namespace, tmp: Path) -> str:
    """Print one workload's block; return its summary: the overhead of danlu.train as the
    median of per-repeat ratios and as the median of paired per-round ratios."""
    repeats = args.repeats or w.repeats
    steps = args.steps or w.steps
    n_interleaved = w.interleaved if args.interleaved is None else args.interleaved
    g = torch.Generator().manual_seed(0)
    size = args.batch or w.batch
    batches = [
        (
            torch.randn(size, *w.input_shape, generator=g).to(args.device),
            torch.randint(0, 10, (size,), generator=g).to(args.device),
        )
        for _ in range(steps)
    ]
    metrics = tmp / f"{name}.jsonl"
    model = w.make_model().to(args.device)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    plain = plain_stepper(model, opt)
    with _danlu(model, opt, batches, metrics) as ctx:

        def danlu(batch: Batch) -> None:
            ctx.step(batch, loss_fn)

        for _ in range(3):  # warm up both (and let "auto" fix the norm's cadence)
            block(plain, batches)
            block(danlu, batches)
        ratios, p_rates, d_rates, cpu_ratios = [], [], [], []
        for i in range(repeats):
            if i % 2 == 0:  # plain, danlu, danlu, plain, ...: drifts hit both alike
                (pw, pc), (dw, dc) = block(plain, batches), block(danlu, batches)
            else:
                (dw, dc), (pw, pc) = block(danlu, batches), block(plain, batches)
            p_rates.append(steps / pw)
            d_rates.append(steps / dw)
            ratios.append(pw / dw)
            cpu_ratios.append(dc / pc)
        cadence = ctx.engine.norm_every
        found = anomalies_found(ctx)
    lines = sum(1 for _ in metrics.open())
    step_s, found_interleaved = interleaved(
        w.make_model, batches, tmp / f"{name}-interleaved.jsonl", n_interleaved, args.device
    )
    ratio, ratio_low, ratio_high = median_ci(ratios)
    print(
        f"== {name}: {params:,} parameters, batch {size}, input {w.input_shape}, on {args.device}"
    )
    print(
        f"plain loop      : {statistics.median(p_rates):8.2f} steps/s (median of "
        f"{repeats} x {steps} steps)"
    )
    print(f"under danlu     : {statistics.median(d_rates):8.2f} steps/s")
    print(
        f"ratio danlu/plain (median of per-repeat ratios): {ratio:.4f}  "
        f"overhead {100 * (1 - ratio):+.2f}%  (95% interval {100 * (1 - ratio_high):+.2f}%.."
        f"{100 * (1 - ratio_low):+.2f}%; target <= 1%)"
    )
    print(
        f"CPU time per step danlu/plain (median, all threads): {statistics.median(cpu_ratios):.4f}"
    )
    print(f"gradient norm cadence chosen by grad_norm_every='auto': every {cadence} step(s)")
    if step_s:
        base = step_s["plain"][0]
        print(
            f"interleaved, median of {n_interleaved} steps each: "
            f"plain {base * 1e3:.3f} ms/step; "
            + "; ".join(
                f"{n} {(t - base) * 1e6:+.0f} us ({100 * (t / base - 1):+.2f}%)"
                for n, (t, *_) in step_s.items()
                if n != "plain"
            )
        )
        print(
            "interleaved, median of paired per-round ratios to plain (95% interval): "
            + "; ".join(
                f"{n} {100 * (r - 1):+.2f}% ({100 * (lo - 1):+.2f}%..{100 * (hi - 1):+.2f}%)"
                for n, (_, r, lo, hi) in step_s.items()
                if n != "plain"
            )
        )
    print(
        f"metric records written: {lines}; anomalies found (skipped steps): {found or 'none'}, "
        f"in the interleaved danlu loops: {found_interleaved or 'none'}"
    )
    summary = (
        f"{name} {100 * (1 - ratio):+.2f}% (repeats; 95% interval "
        f"{100 * (1 - ratio_high):+.2f}%..{100 * (1 - ratio_low):+.2f}%)"
    )
    if step_s:
        _, r, lo, hi = step_s["danlu"]
        summary += (
            f" {100 * (r - 1):+.2f}% (paired rounds; {100 * (lo - 1):+.2f}%.."
            f"{100 * (hi - 1):+.2f}%; A/A control {100 * (step_s[CONTROL][1] - 1):+.2f}%)"
        )
    return summary


def keep_freed_memory() -> bool:
    """Have glibc serve large blocks from the heap and keep freed memory (see the module
    docstring); False where that is not glibc."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3  # <malloc.h>
    return all(
        mallopt(param, value) == 1
        for param, value in (
            (m_mmap_threshold, 1 << 30),
            (m_trim_threshold, 1 << 30),
            (m_top_pad, 64 << 20),
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--workloads", default="cnn,mlp", help=f"of {sorted(WORKLOADS)}")
    ap.add_argument("--repeats", type=int, default=0, help="0: the workload's default")
    ap.add_argument(
        "--steps", type=int, default=0, help="steps per block (0: the workload's default)"
    )
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    ap.add_argument("--batch", type=int, default=0, help="batch size (0: the workload's)")
    ap.add_argument(
        "--interleaved",
        type=int,
        default=None,
        help="steps per loop (0: skip; default per workload)",
    )
    ap.add_argument(
        "--keep-malloc", action="store_true", help="leave glibc's mmap threshold as it is"
    )
    args = ap.parse_args()
    names = [n.strip() for n in args.workloads.split(",") if n.strip()]
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        ap.error(f"--workloads: unknown {unknown}; choose from {sorted(WORKLOADS)}")
    if args.device != "cpu" and not torch.cuda.is_available():
        ap.error(f"--device {args.device}: no CUDA GPU is available here")
    torch.set_num_threads(args.threads)
    if not args.keep_malloc:
        print(f"glibc mmap threshold raised: {keep_freed_memory()}")
    with tempfile.TemporaryDirectory() as tmp:
        summaries = [measure(n, WORKLOADS[n], args, Path(tmp)) for n in names]
    print("summary, overhead of danlu.train (target <= 1%): " + ", ".join(summaries))


if __name__ == "__main__":
    main()
