"""Run the memory tracer in a subprocess (``python -m danlu.estimate.memory.trace_worker``).

No torch in this process: the request goes to the worker as JSON on stdin, progress and the
result come back as JSON lines on stdout; the worker's stderr goes to a temporary file and is
quoted when it fails. Never goes through a shell.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from danlu.core.errors import DataError, SpecError
from danlu.estimate.memory.trace_result import PRECISIONS, TARGETS, StepTrace, TraceRequest

Progress = Callable[[int, int, int], None]
"""``progress(done, total, batch_size)`` while tracing."""


def validate(req: TraceRequest) -> None:
    """Raise :class:`SpecError` naming the flag when a request field is invalid."""
    if not req.batch_sizes or any(b < 1 for b in req.batch_sizes):
        raise SpecError("--batch-size", f"batch sizes must be >= 1, got {list(req.batch_sizes)}")
    if req.precision not in PRECISIONS:
        raise SpecError("--precision", f"{req.precision!r}: use one of {', '.join(PRECISIONS)}")
    if req.target not in TARGETS:
        raise SpecError("--target", f"{req.target!r}: use one of {', '.join(TARGETS)}")
    if req.accumulation < 1:
        raise SpecError("--accumulation", f"must be >= 1, got {req.accumulation}")
    if ":" not in req.model_ref:
        raise SpecError(
            "MODEL_REF",
            f"{req.model_ref!r} is not of the form "
            "package.module:factory (e.g. danlu.estimate.zoo:gpt2_124m)",
        )
    top = req.model_ref.partition(":")[0].split(".")[0]
    where = (*req.sys_path, os.getcwd())
    if importlib.util.find_spec(top) is None and not any(
        (Path(p) / top).exists() or (Path(p) / f"{top}.py").exists() for p in where
    ):
        raise SpecError(
            "MODEL_REF",
            f"cannot find module {top!r}; run from the directory that holds it or add it "
            "to PYTHONPATH",
        )


def trace(
    req: TraceRequest, progress: Progress | None = None, timeout_s: float = 1800.0
) -> list[StepTrace]:
    """Trace every batch size of ``req`` in one subprocess; one :class:`StepTrace` each.

    Raises :class:`SpecError` for a bad model reference or flag, :class:`DataError` when the
    traced program itself fails (with the worker's last error lines).
    """
    validate(req)
    if not req.sys_path:
        req = TraceRequest(
            **{**req.to_json(), "batch_sizes": req.batch_sizes, "sys_path": (os.getcwd(),)}
        )
    cmd = [sys.executable, "-m", "danlu.estimate.memory.trace_worker"]
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True
        )
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(req.to_json()))
        proc.stdin.close()
        result: list[StepTrace] | None = None
        error: dict[str, str] | None = None
        try:
            for line in proc.stdout:
                msg = json.loads(line)
                if "progress" in msg and progress is not None:
                    p = msg["progress"]
                    progress(p["done"], p["total"], p["batch_size"])
                elif "result" in msg:
                    result = [StepTrace.from_json(r) for r in msg["result"]]
                elif "error" in msg:
                    error = msg["error"]
            proc.wait(timeout=timeout_s)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if error is not None and error.get("kind") == "spec":
            raise SpecError(error["field"], error["message"])
        if result is None:
            err.seek(0)
            tail = "".join(err.readlines()[-15:])
            why = error["message"] if error else f"the tracer exited with status {proc.returncode}"
            raise DataError(f"tracing {req.model_ref} failed: {why}\n{tail}")
    if progress is not None:
        progress(len(req.batch_sizes), len(req.batch_sizes), req.batch_sizes[-1])
    return result
