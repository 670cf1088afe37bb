"""Held-out accuracy of the fitted step-time model on the Pollux placement traces.

For each application, fit :func:`danlu.estimate.throughput.fit_throughput` on half of
``placements.csv`` and print the MAPE of predicted step times on the other half (target:
<= 10%, seed 000 section 10.4).

Split (the must-show column): alternate rows of the file in file order -- rows 0, 2, 4, ...
(0-based, header excluded) train, rows 1, 3, 5, ... test. The file lists each placement's
local batch sizes in increasing order, so every placement is in both halves and the test
batch sizes interleave the training ones. Two robustness columns: the swapped split (train
odd, test even) and a seeded shuffle (numpy default_rng(0), first half trains). A last
column, for information only, fits on all of ``placements.csv`` and predicts
``scalability.csv`` (placements never measured directly, up to 16 nodes): extrapolation.

Run from the project root::

    PYTHONPATH=src python benchmarks/throughput_fit.py [--data ../shared/data/pollux/traces]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from danlu.estimate.throughput import (
    StepMeasurement,
    fit_throughput,
    load_placements,
    load_scalability,
    mape,
)

APPS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
DEFAULT_DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "pollux" / "traces"
TARGET = 10.0


def held_out(train: Sequence[StepMeasurement], test: Sequence[StepMeasurement]) -> float:
    """MAPE (%) on ``test`` of a model fitted on ``train``."""
    return mape(fit_throughput(train), test)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="Pollux traces folder")
    args = parser.parse_args(argv)

    print("split: alternate rows in file order (train rows 0,2,4,..; test rows 1,3,5,..)")
    print("robustness: 'swapped' = train odd / test even; 'shuffled' = default_rng(0) halves;")
    print("'scal.' = fit on all placements.csv rows, MAPE on scalability.csv (extrapolation)")
    header = (
        f"{'application':<12} {'rows':>5} {'train':>5} {'test':>5} "
        f"{'MAPE test %':>11} {'train %':>8} {'swapped %':>9} {'shuffled %':>10} {'scal. %':>7}  "
        "gamma   pass"
    )
    print(header)
    print("-" * len(header))
    worst = 0.0
    start = time.perf_counter()
    for app in APPS:
        rows = load_placements(args.data / app / "placements.csv")
        train, test = rows[0::2], rows[1::2]
        model = fit_throughput(train)
        err = mape(model, test)
        swapped = held_out(test, train)
        order = np.random.default_rng(0).permutation(len(rows))
        half = len(rows) // 2
        shuffled = held_out([rows[i] for i in order[:half]], [rows[i] for i in order[half:]])
        scal = mape(fit_throughput(rows), load_scalability(args.data / app / "scalability.csv"))
        worst = max(worst, err)
        print(
            f"{app:<12} {len(rows):>5} {len(train):>5} {len(test):>5} {err:>11.2f} "
            f"{mape(model, train):>8.2f} {swapped:>9.2f} {shuffled:>10.2f} {scal:>7.2f}  "
            f"{model.params.gamma:5.2f}   {'yes' if err <= TARGET else 'NO'}"
        )
    print(
        f"worst held-out MAPE {worst:.2f}% (target <= {TARGET:.0f}%); "
        f"6 x 4 fits in {time.perf_counter() - start:.2f} s"
    )
    return 0 if worst <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
