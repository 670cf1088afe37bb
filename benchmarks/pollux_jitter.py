"""How much the danlu policy's figures on the Pollux workloads move when nothing but the
arrival times moves a little: every run of ``danlu_pollux.py`` again on ``--copies`` copies
of its workload, each job's submission shifted by a uniform draw in [-J, +J] seconds
(``--jitter`` J, default 10 s; the draw is seeded by the copy's number, from ``--first-copy``
on, and a time below 0 is 0).

A shift of a few seconds changes which 60 s round sees a job first for the jobs that arrive
near a round's tick, and from there the whole run can take another course. So the spread of
the copies is the noise floor under one run's figure: a change of the policy that moves a
run by less is not distinguishable from it on that run. Prints, per run, the ratio of the
unshifted workload (the main table's) and of the copies (mean, standard deviation, lowest,
highest) to Pollux's published average, how many copies meet the 0.80 target, Pollux's p99,
and both at once; then the 12-run mean ratio of each copy and the counts over all runs.
Asserts nothing.

    PYTHONPATH=src python benchmarks/pollux_jitter.py [--loads 0.5,1.0,1.5]
        [--workloads 1,2,3,4] [--copies 8] [--jitter 10] [--first-copy 1] [--set KNOB=VALUE ...]

Same simulator settings as ``danlu_pollux.py`` (16 x 4 GPUs, 60 s rounds, 30 s restarts);
about 2.5 s a run on 2 cores, so ~4 minutes for the default 8 copies of the 12 runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
from danlu_pollux import (
    DATA,
    FOLDERS,
    POLLUX,
    add_knob_option,
    add_workload_options,
    jct_figures,
    knob_settings,
    simulate,
    targets_met,
)

from danlu.sched.policies.danlu import DanluPolicy
from danlu.sim.elastic import ApplicationProfile, load_profiles
from danlu.sim.workload import Workload, WorkloadJob, in_submission_order, load_workload


def shifted(workload: Workload, jitter: float, seed: int) -> Workload:
    """``workload`` with every submission moved by a uniform draw in [-jitter, +jitter]
    seconds (at least 0), in the new submission order; seed 0 (or jitter 0) leaves it as is."""
    if seed == 0 or jitter <= 0:
        return workload
    rng = random.Random(seed)
    moved = [
        WorkloadJob(
            dataclasses.replace(
                job.request,
                submit_time=max(0.0, job.request.submit_time + rng.uniform(-jitter, jitter)),
            ),
            job.work,
        )
        for job in workload.jobs
    ]
    return dataclasses.replace(workload, jobs=in_submission_order(moved))


def run(
    workload: Workload, knobs: Mapping[str, Any], profiles: Mapping[str, ApplicationProfile]
) -> tuple[float, float]:
    """Average and p99 JCT of one danlu run of ``workload`` (the main table's settings)."""
    return jct_figures(simulate(workload, DanluPolicy(**knobs), profiles))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workload_options(parser)
    parser.add_argument("--copies", type=int, default=8, help="shifted copies of each workload")
    parser.add_argument("--jitter", type=float, default=10.0, help="largest shift, seconds")
    parser.add_argument(
        "--first-copy", type=int, default=1, help="seed of the first copy (the others follow)"
    )
    add_knob_option(parser)
    args = parser.parse_args()
    if args.copies < 1:
        parser.error("--copies must be at least 1")
    if args.first_copy < 1:
        parser.error("--first-copy must be at least 1 (seed 0 is the unshifted workload)")
    if args.jitter < 0:
        parser.error("--jitter must be 0 or more seconds")
    knobs = knob_settings(parser, args)
    profiles = load_profiles(DATA / "traces")
    started = time.perf_counter()
    print(
        f"{'load':>4} {'workload':>8} {'unshifted':>9} {'copies':>6} {'sd':>6} {'lowest':>6} "
        f"{'highest':>7} {'<=0.80':>6} {'p99 ok':>6} {'both':>4}"
    )
    runs = average_ok = p99_total = both_total = 0
    per_copy: list[list[float]] = [[] for _ in range(args.copies)]
    for load in args.loads:
        for number in args.workloads:
            base = load_workload(DATA / FOLDERS[load] / f"workload-{number}.csv")
            pavg = POLLUX[(load, number)][0]
            unshifted = run(base, knobs, profiles)[0] / pavg
            ratios, met, p99_ok, both = [], 0, 0, 0
            for copy in range(args.copies):
                avg, p99 = run(shifted(base, args.jitter, args.first_copy + copy), knobs, profiles)
                ratios.append(avg / pavg)
                per_copy[copy].append(avg / pavg)
                avg_met, p99_met = targets_met(avg, p99, load, number)
                met += avg_met
                p99_ok += p99_met
                both += avg_met and p99_met
            values = np.array(ratios)
            runs += args.copies
            average_ok += met
            p99_total += p99_ok
            both_total += both
            print(
                f"{load:>4} {number:>8} {unshifted:>9.3f} {values.mean():>6.3f} "
                f"{values.std(ddof=1) if len(values) > 1 else 0.0:>6.3f} {values.min():>6.3f} "
                f"{values.max():>7.3f} {met:>6} {p99_ok:>6} {both:>4}",
                flush=True,
            )
    means = [float(np.mean(r)) for r in per_copy]
    print("mean ratio of each copy: " + " ".join(f"{m:.3f}" for m in means))
    spread = np.std(means, ddof=1) if len(means) > 1 else 0.0
    print(
        f"copies' mean ratio {np.mean(means):.3f} (sd {spread:.3f}), jitter +-{args.jitter:g} s, "
        f"{args.copies} copies ({time.perf_counter() - started:.0f} s)"
    )
    print(f"of {runs} runs: average met {average_ok}, p99 met {p99_total}, both {both_total}")


if __name__ == "__main__":
    main()
