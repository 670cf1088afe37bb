"""Speed of ``danlu estimate`` and accuracy of the fitted M(b).

1. Wall time of ``danlu estimate danlu.estimate.zoo:gpt2_124m --batch-size 8 --json`` (a fresh
   process, as a user runs it; target < 15 s on a 2-core machine).
2. The same with ``--sweep`` of 10 batch sizes (fitted from b = 1, 2, 4): the time spent after
   the traces (fit + sweep; target < 1 s) and the extra wall time.
3. M(b) fitted from b in {1, 2, 4} against tracing at b = 32 and 64 (logical and reserved
   peaks; target within 1%) for several zoo models.
4. ``--warm``: a trace in a worker started per trace (as ``danlu estimate`` does) against
   one in a worker started ahead of need (``WarmTracers``, as the server does for
   ``gpu_memory: auto`` submissions after its first): median wall seconds of each over
   ``--repeats`` alternating pairs, their ratio, and whether the traces are identical.

Run: ``python benchmarks/estimate_speed.py [--skip-fit] [--skip-speed] [--warm]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import time

from danlu.estimate.memory import (
    ExtrapolationError,
    FittedMemoryModel,
    TraceRequest,
    WarmTracers,
    get_gpu,
    replay,
    trace,
)

CLI = (
    "import sys, typer\n"
    "from danlu.cli.estimate import register\n"
    "app = typer.Typer()\n"
    "register(app)\n"
    "app.callback()(lambda: None)\n"
    "app(sys.argv[1:], prog_name='danlu')\n"
)
FIT_MODELS = ("gpt2_124m", "bert_base", "resnet18", "vit_tiny", "mlp_large")


def _cli(args: list[str]) -> tuple[float, dict[str, object]]:
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", CLI, "estimate", *args, "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    return time.perf_counter() - t0, json.loads(out.stdout)


def speed() -> None:
    """Print the CLI timings."""
    ref = "danlu.estimate.zoo:gpt2_124m"
    wall, one = _cli([ref, "--batch-size", "8", "--precision", "bf16"])
    print(
        f"danlu estimate {ref} --batch-size 8 --precision bf16: {wall:.2f} s wall "
        f"(trace {one['trace_seconds']} s); peak_logical_bytes={one['peak_logical_bytes']} "
        f"peak_reserved_bytes={one['peak_reserved_bytes']} (target < 15 s)"
    )
    sweep = "1,2,4,8,12,16,24,32,48,64"
    wall2, many = _cli([ref, "--batch-size", "8", "--precision", "bf16", "--sweep", sweep])
    print(
        f"... --sweep {sweep} (fit from 1,2,4): fit + 10-size sweep {many['fit_seconds']} s "
        f"after the traces (target < 1 s); {wall2:.2f} s wall in all, "
        f"{wall2 - wall:+.2f} s vs one batch size (three more traced batch sizes)"
    )


def fit_accuracy() -> None:
    """Print fitted-vs-traced errors at b = 32 and 64."""
    gpu = get_gpu("h100")
    print(
        "| model | fitted from b | b | traced logical | fitted logical | error "
        "| traced reserved | fitted reserved | error |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in FIT_MODELS:
        traces = trace(
            TraceRequest("danlu.estimate.zoo:" + name, (1, 2, 4, 8, 16, 32, 64), precision="bf16")
        )
        by_t = {t.batch_size: t for t in traces}
        by_b = {t.batch_size: replay(t, gpu) for t in traces}
        points = (1, 2, 4)
        model = FittedMemoryModel([by_b[b] for b in points], gpu, traces=[by_t[b] for b in points])
        try:
            model.predict_logical(32)
        except ExtrapolationError as exc:  # flat at 1, 2, 4: the fit says so; use 4, 8, 16
            print(f"<!-- {name}: {exc} -->")
            points = (4, 8, 16)
            model = FittedMemoryModel(
                [by_b[b] for b in points], gpu, traces=[by_t[b] for b in points]
            )
        for b in (32, 64):
            t = by_b[b]
            lg, rs = model.predict_logical(b), model.predict_reserved(b)
            el = (lg - t.peak_logical_bytes) / t.peak_logical_bytes
            er = (rs - t.peak_reserved_bytes) / t.peak_reserved_bytes
            pts = ",".join(map(str, points))
            print(
                f"| {name} | {pts} | {b} | {t.peak_logical_bytes} | {lg} | {el:+.3%} "
                f"| {t.peak_reserved_bytes} | {rs} | {er:+.3%} |",
                flush=True,
            )


def warm_vs_cold(repeats: int, model: str = "resnet_tiny") -> None:
    """Print the wall time of a cold and a warm trace of ``model`` at batch 8."""
    req = TraceRequest("danlu.estimate.zoo:" + model, (8,))
    workers = WarmTracers(1)
    cold: list[float] = []
    warm: list[float] = []
    same = True
    try:
        reference = None
        trace(req, workers=workers)  # the first trace starts the first waiting worker
        for _ in range(repeats):
            for times, pool in ((cold, None), (warm, workers)):
                time.sleep(8.0)  # the replacement worker finishes its start-up meanwhile
                t0 = time.perf_counter()
                result = trace(req, workers=pool)
                times.append(time.perf_counter() - t0)
                plain = [dataclasses.replace(t, trace_seconds=0.0) for t in result]
                reference = reference or plain
                same = same and plain == reference
    finally:
        workers.close()
    c, w = statistics.median(cold), statistics.median(warm)
    print(
        f"trace of zoo:{model} at batch 8, median of {repeats}: cold {c:.2f} s, "
        f"warm {w:.2f} s, warm/cold {w / c:.2f}; identical traces: {same}"
    )


def main() -> int:
    """Command line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-fit", action="store_true")
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--warm", action="store_true", help="also time warm against cold tracers")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    if not args.skip_speed:
        speed()
    if not args.skip_fit:
        fit_accuracy()
    if args.warm:
        warm_vs_cold(args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
