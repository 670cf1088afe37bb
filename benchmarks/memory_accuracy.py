"""Memory-model accuracy: predicted peaks against real ones.

1. CPU (always): ``peak_logical_bytes`` traced under FakeTensorMode (target ``cpu``) against the
   peak of the real CPU allocator's events over the same steady-state step (torch.profiler,
   profile_memory=True), for zoo models x 3 batch sizes x {fp32, bf16}.
2. GPU (when CUDA is available): the prediction for the detected GPU type, made in a
   subprocess that never touches the GPU, against ``torch.cuda.max_memory_reserved`` over a real
   steady-state step, for >= 8 zoo models x 3 batch sizes; prints the MAPE (target <= 5%).
   Without CUDA it prints "not measured: no GPU available" and exits 0.

Run: ``python benchmarks/memory_accuracy.py [--cpu-only | --gpu-only] [--calibrate out.json]
[--jobs N]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from danlu.estimate.memory import TraceRequest, estimate_memory, gpu_for_device, trace

ZOO = "danlu.estimate.zoo:"
CPU_CASES = {
    "mlp_small": (4, 16, 64),
    "resnet_tiny": (4, 8, 16),
    "gpt2_tiny": (4, 8, 16),
    "bert_tiny": (4, 8, 16),
    "vit_tiny": (4, 8, 16),
}
GPU_CASES = {
    "mlp_small": (64, 256, 1024),
    "mlp_large": (64, 256, 1024),
    "resnet_tiny": (32, 128, 512),
    "resnet18": (16, 64, 128),
    "gpt2_tiny": (16, 64, 256),
    "gpt2_124m": (2, 4, 8),
    "bert_tiny": (16, 64, 256),
    "bert_base": (4, 8, 16),
    "vit_tiny": (32, 128, 512),
}


def cpu_table() -> float:
    """Print the CPU accuracy table; return the largest absolute error (fraction)."""
    from danlu.estimate.memory.ground_truth import cpu_peak

    print("| model | precision | batch | traced peak (B) | real CPU peak (B) | error |")
    print("|---|---|---:|---:|---:|---:|")
    worst = 0.0
    for name, sizes in CPU_CASES.items():
        for precision in ("fp32", "bf16"):
            traces = trace(TraceRequest(ZOO + name, sizes, precision=precision, target="cpu"))
            for tr in traces:
                real = cpu_peak(ZOO + name, tr.batch_size, precision=precision)
                err = (tr.peak_logical_bytes - real) / real
                worst = max(worst, abs(err))
                print(
                    f"| {name} | {precision} | {tr.batch_size} | {tr.peak_logical_bytes} "
                    f"| {real} | {err:+.3%} |",
                    flush=True,
                )
    print(f"max |error| = {worst:.3%} (target <= 1%)")
    return worst


def _measure(ref: str, batch: int, precision: str) -> dict[str, int] | str:
    """A real steady-state step in a fresh process: its peaks, or why it failed."""
    cmd = [sys.executable, __file__, "--measure", ref, str(batch), precision]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return f"failed: {out.stderr.strip().splitlines()[-1:]}"
    result: dict[str, int] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def gpu_table(calibrate: str | None, jobs: int = 1) -> None:
    """Measure on the GPU and print the MAPE of the reserved-peak prediction.

    ``jobs`` > 1 traces and measures that many cases at once (each measurement is its own
    process with its own caching allocator, so the reserved peaks are unaffected); the CUDA
    context, read off the whole device's used memory, is then measured by running the
    first model's cases again one at a time."""
    import torch

    if not torch.cuda.is_available():
        print("GPU: not measured: no GPU available")
        return
    gpu = gpu_for_device(
        torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0).total_memory
    )
    print(f"\nGPU {torch.cuda.get_device_name(0)} -> table entry {gpu.name}")
    keys = [(name, precision) for name in GPU_CASES for precision in ("fp32", "bf16")]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        predicted = list(
            pool.map(
                lambda k: estimate_memory(
                    TraceRequest(ZOO + k[0], GPU_CASES[k[0]], precision=k[1]), gpu
                ),
                keys,
            )
        )
        cases = [
            (name, precision, p)
            for (name, precision), preds in zip(keys, predicted, strict=True)
            for p in preds
        ]
        measured = list(pool.map(lambda c: _measure(ZOO + c[0], c[2].batch_size, c[1]), cases))
    print("| model | precision | batch | predicted reserved | measured reserved | error |")
    print("|---|---|---:|---:|---:|---:|")
    errors = []
    context = []
    for (name, precision, p), real in zip(cases, measured, strict=True):
        if isinstance(real, str):
            print(f"| {name} | {precision} | {p.batch_size} | {p.peak_reserved_bytes} | {real} | |")
            continue
        err = (p.peak_reserved_bytes - real["reserved"]) / real["reserved"]
        errors.append(abs(err))
        context.append(real["device_used"] - real["reserved"])
        print(
            f"| {name} | {precision} | {p.batch_size} | {p.peak_reserved_bytes} "
            f"| {real['reserved']} | {err:+.2%} |",
            flush=True,
        )
    if errors:
        print(
            f"MAPE = {100 * sum(errors) / len(errors):.2f}% over {len(errors)} runs, "
            f"max {100 * max(errors):.2f}% (target <= 5%)"
        )
    if jobs > 1:
        first = [c for c in cases if c[0] == cases[0][0]]
        alone = [_measure(ZOO + c[0], c[2].batch_size, c[1]) for c in first]
        context = [r["device_used"] - r["reserved"] for r in alone if not isinstance(r, str)]
    if context:
        ctx = sorted(context)[len(context) // 2]
        print(f"CUDA context (device used - reserved): median {ctx} bytes of {len(context)} runs")
        if calibrate:
            with open(calibrate, "w") as f:
                json.dump({gpu.name: {"context_bytes": int(ctx)}}, f, indent=2)
            print(f"wrote {calibrate} (pass it with --gpu-table)")


def main() -> int:
    """Command line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu-only", action="store_true")
    ap.add_argument("--gpu-only", action="store_true")
    ap.add_argument("--calibrate", metavar="OUT_JSON")
    ap.add_argument(
        "--jobs", type=int, default=1, help="cases traced and measured at once (default 1)"
    )
    ap.add_argument(
        "--measure", nargs=3, metavar=("REF", "BATCH", "PRECISION"), help=argparse.SUPPRESS
    )
    args = ap.parse_args()
    if args.measure:
        from danlu.estimate.memory.ground_truth import cuda_peak

        ref, b, precision = args.measure
        print(json.dumps(cuda_peak(ref, int(b), precision=precision)))
        return 0
    if not args.gpu_only:
        cpu_table()
    if not args.cpu_only:
        gpu_table(args.calibrate, max(1, args.jobs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
