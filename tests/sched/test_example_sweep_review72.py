"""``examples/sweeps/lr.yaml`` promises the median stopping rule and a quick run: its
trials must stay past ``min_steps`` longer than the gap between two judgements (so that
every trial the rule could stop is judged at least once while it runs), and its rounds of
``parallel`` trials must leave the whole sweep at about a minute. Its 8 trials took four
rounds (64 s of steps alone), and a trial was past step 10 for 12 s, no longer than the
gap between judgements (every :data:`JUDGE_EVERY_SECONDS`, in reconcile passes every
``interval`` seconds)."""

from __future__ import annotations

import math
from pathlib import Path

import yaml

from danlu.config import Settings
from danlu.core.sweep import SweepSpec
from danlu.server.services.sweeps import JUDGE_EVERY_SECONDS

EXAMPLE = Path(__file__).parents[2] / "examples" / "sweeps" / "lr.yaml"
STEPS_BUDGET = 50.0
"""Seconds of steps along the sweep's critical path: about a minute with the trials'
start-ups (a Python process importing torch and danlu.train each)."""


def _example() -> tuple[SweepSpec, int, float]:
    """The example's spec, its trials' ``--steps`` and ``--step-seconds``."""
    spec = SweepSpec.model_validate(yaml.safe_load(EXAMPLE.read_text()))
    command = [str(part) for part in spec.trial["command"]]
    steps = int(command[command.index("--steps") + 1])
    step_seconds = float(command[command.index("--step-seconds") + 1])
    return spec, steps, step_seconds


def test_every_trial_is_judged_while_it_runs_past_min_steps() -> None:
    spec, steps, step_seconds = _example()
    rule = spec.early_stopping
    assert rule is not None and rule.rule == "median"
    interval = Settings.model_fields["interval"].default  # danlu up's reconcile pass
    judged_within = JUDGE_EVERY_SECONDS + interval  # the longest gap between judgements
    assert (steps - rule.min_steps) * step_seconds > judged_within
    # a trial after the first round has the first round's and the running ones as peers
    assert spec.total > spec.parallel and rule.min_trials <= 2 * spec.parallel - 1


def test_the_example_stays_quick() -> None:
    spec, steps, step_seconds = _example()
    rounds = math.ceil(spec.total / spec.parallel)
    assert rounds * steps * step_seconds <= STEPS_BUDGET
