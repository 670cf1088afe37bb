"""``examples/sweeps/batch.yaml`` searches the batch size as docs/sweeps.md says it must be
searched: its trial spec names no ``training.global_batch_size`` (which would replace every
trial's batch), so it draws no note, and ``examples/sweeps/regression.py`` trains the batch
its ``DANLU_HPARAMS`` says (it trained 64 whatever the sweep chose)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from danlu.core.sweep import parse_sweep

EXAMPLES = Path(__file__).parents[2] / "examples" / "sweeps"
SRC = Path(__file__).parents[2] / "src"


def test_the_batch_example_leaves_each_trial_its_batch() -> None:
    from danlu.core.sweep import fixed_batch_note

    spec = parse_sweep(yaml.safe_load((EXAMPLES / "batch.yaml").read_text()))
    assert "batch_size" in spec.parameters
    assert fixed_batch_note(spec, spec.trial_spec()) is None
    assert spec.trial["resources"]["gpu_memory"] != "auto"


def test_the_regression_trial_trains_the_batch_its_parameters_say(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DANLU_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH")) if p)
    env["DANLU_HPARAMS"] = json.dumps({"batch_size": 16, "lr": 0.1})
    ran = subprocess.run(
        [sys.executable, str(EXAMPLES / "regression.py"), "--steps", "2"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[-1].startswith("lr 0.1 width 16 batch 16: loss "), ran.stdout
