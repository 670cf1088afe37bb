"""End to end against a real ``danlu up``: a job array with a failing task ends DONE with a
reason that names the task (``danlu sweep show`` read ``DONE: 3 tasks ended``, as if every
task did its work), and ``danlu sweep submit`` of a sweep searching ``batch_size`` while its
trial spec fixes ``training.global_batch_size`` prints a ``note:`` that the searched batch
changes nothing the trials train (docs/sweeps.md, "Searching the batch size")."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from e2e_server import Server, danlu

pytestmark = pytest.mark.slow


def test_an_array_with_a_failed_task_says_which(server: Server, tmp_path: Path) -> None:
    spec = tmp_path / "shard.json"
    code = "import os, sys; sys.exit(3 if os.environ['DANLU_ARRAY_INDEX'] == '1' else 0)"
    body = {
        "name": "shard",
        "command": [sys.executable, "-c", code],
        "resources": {"gpus": 1, "gpu_memory": "1GiB"},
        "max_restarts": 0,
    }
    spec.write_text(json.dumps(body))
    home = ("--home", str(server.home))
    submitted = danlu("submit", str(spec), "--array", "0-2%2", *home)
    assert submitted.returncode == 0, submitted.stderr
    found = re.search(r"submitted array ([0-9a-f]{12})", submitted.stdout)
    assert found, submitted.stdout
    array = found.group(1)
    waited = danlu("wait", array, "--timeout", "2m", *home, timeout=150)
    assert waited.returncode == 1, waited.stdout + waited.stderr  # a task failed
    shown = danlu("sweep", "show", array, *home)
    assert shown.returncode == 0, shown.stderr
    first = shown.stdout.splitlines()[0]
    assert first == (
        f"array {array} (shard): DONE: 3 tasks ended (task 1 FAILED); 3 of 3 tasks submitted"
    )


def test_a_searched_batch_size_the_trial_spec_fixes_is_noted(
    server: Server, tmp_path: Path
) -> None:
    spec = tmp_path / "bs.yaml"
    spec.write_text(
        json.dumps(
            {
                "name": "bs",
                "trial": {
                    "command": [sys.executable, "-c", "pass"],
                    "resources": {"gpus": 1, "gpu_memory": "1GiB"},
                    "training": {"global_batch_size": 64},
                },
                "parameters": {"batch_size": {"values": [16, 128]}},
                "method": "grid",
            }
        )
    )
    submitted = danlu("sweep", "submit", str(spec), "--home", str(server.home))
    assert submitted.returncode == 0, submitted.stderr
    notes = [line for line in submitted.stdout.splitlines() if line.startswith("note:")]
    assert notes == [
        "note: every trial trains the global batch 64 of trial.training.global_batch_size, "
        "whatever its batch_size says (DANLU_GLOBAL_BATCH_SIZE replaces the batch a "
        "danlu.train script asks for): to search the batch size, leave "
        "training.global_batch_size out of the trial spec and give gpu_memory for the "
        "largest batch (danlu estimate MODEL --batch-size N)"
    ]
