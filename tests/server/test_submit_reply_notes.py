"""``POST /jobs`` and ``POST /jobs/{id}/rerun`` answer with the submission's ``notes`` (how
``gpu_memory: auto`` was resolved, or why it could not be; the model family inferred), in
the words ``POST /sweeps`` gives its ``notes``. They were only in the job's
``pending_reason``, which the CLI split back into notes; the reason keeps them as it did.
A real server, on SQLite and on PostgreSQL."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from helpers import live_server, spec, submit

MODEL = "elsewhere.models:build"
SKIPPED = (
    f"memory estimate skipped (training.model '{MODEL}' is not in a package this server "
    "traces (DANLU_TRACE_MODULES: "
)
NOT_INFERRED = (
    "model family not inferred (no layer it knows, or the trace failed): the interference "
    "model uses its median pair"
)
NEXT_ROUND = "waiting for the next scheduling round"


def _auto(name: str, **extra: Any) -> dict[str, Any]:
    """A job spec of ``gpu_memory: auto`` and ``training.family: auto`` whose model this
    server does not trace: whole GPUs, and no family inferred."""
    resources = {"gpus": 1, "gpu_memory": "auto"}
    training = {"model": MODEL, "family": "auto"}
    return spec(name, "pass", resources=resources, training=training, **extra)


def test_the_reply_of_a_submission_carries_its_notes(tmp_path: Path, db_url: str) -> None:
    with (
        live_server(tmp_path, fake_gpus="1x80GiB", db_url=db_url, start_loops=False) as live,
        live.client() as c,
    ):
        job = submit(c, _auto("auto"))
        skipped, family = job["notes"]
        assert skipped.startswith(SKIPPED) and skipped.endswith("): using whole GPUs")
        assert family == NOT_INFERRED
        told = "; ".join(job["notes"])
        assert job["pending_reason"] == f"{NEXT_ROUND} ({told})"  # as before
        assert "notes" not in c.get(f"/jobs/{job['id']}").json()  # a submission's reply only

        after = submit(c, _auto("after", depends_on=[job["id"]]))
        assert after["notes"] == job["notes"]
        assert after["pending_reason"] == (f"waiting for job {job['id']} (auto) to succeed; {told}")

        plain = submit(c, spec("plain", "pass", resources={"gpus": 1, "gpu_memory": "1GiB"}))
        assert plain["notes"] == [] and plain["pending_reason"] == NEXT_ROUND

        body = {
            "name": "lr",
            "trial": _auto("trial"),
            "parameters": {"lr": {"values": [0.1, 0.01]}},
            "metric": {"name": "loss"},
            "method": "grid",
            "parallel": 1,
        }
        sweep = c.post("/sweeps", json=body)
        assert sweep.status_code == 201, sweep.text
        assert sweep.json()["notes"] == job["notes"]  # the same notes, in the same words


def test_a_rerun_replies_with_its_submissions_notes(tmp_path: Path, db_url: str) -> None:
    with (
        live_server(tmp_path, fake_gpus="1x80GiB", db_url=db_url, start_loops=False) as live,
        live.client() as c,
    ):
        job = submit(c, _auto("again"))
        c.post(f"/jobs/{job['id']}/cancel").raise_for_status()  # queued: cancelled at once
        again = c.post(f"/jobs/{job['id']}/rerun")
        assert again.status_code == 201, again.text
        assert again.json()["id"] != job["id"]
        assert again.json()["notes"] == job["notes"] and len(job["notes"]) == 2


def test_danlu_run_prints_the_notes_of_its_submission(tmp_path: Path) -> None:
    """``danlu run --gpu-memory auto`` said nothing when the memory could not be estimated:
    the job got whole GPUs without a word."""
    from typer.testing import CliRunner

    from danlu.cli.main import app

    with live_server(tmp_path, fake_gpus="1x80GiB") as live:
        flags = ["--url", live.url, "--token", live.token]
        command = ["run", *flags, "--gpu-memory", "auto", "--", sys.executable, "-c", "pass"]
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 0, result.output
        lines = result.stderr.splitlines()
        assert lines[0].startswith("danlu: job ") and lines[0].endswith(
            "submitted (Ctrl-C cancels it)"
        )
        assert lines[1] == "danlu: note: gpu_memory: auto without training.model: using whole GPUs"
