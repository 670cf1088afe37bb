"""Run the memory tracer in a subprocess (``python -m danlu.estimate.memory.trace_worker``).

No torch in this process: the request goes to the worker as JSON on stdin, progress and the
result come back as JSON lines on stdout; the worker's stderr goes to a temporary file and is
quoted when it fails. Never goes through a shell.

A worker spends most of a small model's trace starting up (~3-5 s on a CPU: Python, torch
and its fake-tensor machinery) before it reads its request. A long-lived caller (the server,
which traces every ``gpu_memory: auto`` submission) passes :class:`WarmTracers`: workers
started ahead of need, already past that start-up and waiting on stdin. A warm worker is the
same program with the same environment and working directory as a cold one, and it reads
the user's model only after its request arrives, so the result is the same.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import IO

from danlu.core.errors import DataError, SpecError
from danlu.core.spec import MAX_BATCH
from danlu.core.values import range_message
from danlu.estimate.checks import check_bool
from danlu.estimate.memory.trace_result import (
    TARGETS,
    StepTrace,
    TraceRequest,
    file_path_problem,
    module_path_problem,
    spec_error_from_reply,
)

Progress = Callable[[int, int, int], None]
"""``progress(done, total, batch_size)`` while tracing."""


def validate(req: TraceRequest) -> None:
    """Raise :class:`SpecError` naming the flag when a request field is invalid. Batch sizes
    lie within ``1..MAX_BATCH``, the largest a job spec may give (past it torch overflows
    a tensor's size inside the worker: a C++ traceback instead of an answer)."""
    if not req.batch_sizes:
        raise SpecError("--batch-size", "give at least one batch size")
    for b in req.batch_sizes:
        if isinstance(b, bool) or not isinstance(b, int):  # 2.5 reached the model's batch
            raise SpecError("--batch-size", f"batch sizes must be integers, got {b!r}")
        if not 1 <= b <= MAX_BATCH:
            raise SpecError("--batch-size", f"batch sizes {range_message(1, MAX_BATCH, b)}")
    # (the precision's name is checked, and made lower case, by TraceRequest itself)
    if req.target not in TARGETS:
        raise SpecError("--target", f"{req.target!r}: use one of {', '.join(TARGETS)}")
    if (
        isinstance(req.accumulation, bool)
        or not isinstance(req.accumulation, int)
        or req.accumulation < 1
    ):
        raise SpecError("--accumulation", f"must be an integer >= 1, got {req.accumulation!r}")
    if req.accumulation > MAX_BATCH:  # each of its micro-batches holds a sample at least;
        # past 2**63 torch's division of the loss overflowed inside the worker
        raise SpecError(
            "--accumulation",
            f"gradient accumulation steps {range_message(1, MAX_BATCH, req.accumulation)} "
            "(the largest batch a job may give: each step's micro-batch is a sample at least)",
        )
    check_bool("--checkpointing", req.checkpointing)  # "no" was truthy
    check_bool("--data-parallel", req.data_parallel)
    if ":" not in req.model_ref:
        raise SpecError(
            "MODEL_REF",
            f"{req.model_ref!r} is not of the form "
            "package.module:factory (e.g. danlu.estimate.zoo:gpt2_124m)",
        )
    module_name = req.model_ref.partition(":")[0]
    problem = module_path_problem(module_name)
    if problem:
        raise SpecError("MODEL_REF", problem)
    top = module_name.split(".")[0]
    where = (*req.sys_path, os.getcwd())
    if _names_a_file(module_name, where):
        # a file's name (mymodels.py:make): the worker's import failed after its start-up
        # with "No module named 'mymodels.py'; 'mymodels' is not a package"
        raise SpecError("MODEL_REF", file_path_problem(module_name))
    if top == "__main__":
        raise SpecError(
            "MODEL_REF",
            f"{req.model_ref!r}: the tracer runs in a subprocess of its own, whose __main__ is "
            "not your script; put the factory in a module and name it, e.g. mymodels:factory",
        )
    if _find_spec(top) is None and not any(
        (Path(p) / top).exists() or (Path(p) / f"{top}.py").exists() for p in where
    ):
        raise SpecError(
            "MODEL_REF",
            f"cannot find module {top!r}; run from the directory that holds it or add it "
            "to PYTHONPATH",
        )


def _names_a_file(module_name: str, where: tuple[str, ...]) -> bool:
    """Whether ``module_name`` is a file's name, ``name.py``, rather than a module path: the
    file is in one of the folders ``where`` the tracer imports from (and no package ``name``
    beside it), or ``name`` is a module found on ``sys.path`` that is no package, so no
    submodule ``py`` of it can be imported."""
    top, _, rest = module_name.partition(".")
    if rest != "py":
        return False
    if any((Path(p) / module_name).is_file() and not (Path(p) / top).is_dir() for p in where):
        return True
    found = _find_spec(top)
    if found is None:
        return False
    if isinstance(found, importlib.machinery.ModuleSpec):
        return found.submodule_search_locations is None
    return not hasattr(found, "__path__")  # a module imported already, without a spec


def _find_spec(name: str) -> object | None:
    """``importlib.util.find_spec(name)`` of a top-level module (None: not found), or the
    module itself when it is imported already without a ``__spec__``, where ``find_spec``
    raised a bare ValueError (the worker's own import then says what is wrong, if anything)."""
    try:
        return importlib.util.find_spec(name)
    except ValueError:
        return sys.modules.get(name)


_WORKER = [sys.executable, "-m", "danlu.estimate.memory.trace_worker"]
Worker = tuple["subprocess.Popen[str]", IO[str]]
"""A started trace worker and the temporary file its stderr goes to."""


def _start_worker() -> Worker:
    """A worker in a session of its own, so that :func:`_kill_group` reaches whatever the
    user's factory starts in it too."""
    # read back as UTF-8 with undecodable bytes replaced: what the user's code writes there
    # need not be text, and its quoted tail raised UnicodeDecodeError instead of the failure
    err = tempfile.TemporaryFile(  # noqa: SIM115 (owned by the worker's holder)
        "w+", encoding="utf-8", errors="replace"
    )
    try:
        proc = subprocess.Popen(
            _WORKER,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            start_new_session=_GROUPS,
        )
    except BaseException:
        err.close()
        raise
    return proc, err


_GROUPS = hasattr(os, "killpg") and hasattr(os, "waitid")
"""Whether workers run in process groups of their own (POSIX)."""


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """Kill a worker that is not reaped yet and every process left in its group: a process
    the factory forked holds the worker's output pipe, and reading the pipe to its end
    waited for it (past the timeout, for good with one that never ends). Safe while the
    worker is unreaped: its process-group id cannot be anyone else's."""
    if _GROUPS:  # (no group left: the worker exited and left nothing behind)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.kill()  # (a no-op for a worker already reaped)


def _wait_unreaped(proc: subprocess.Popen[str]) -> None:
    """Wait for the worker to exit without reaping it (:func:`_kill_group` may then still
    name its group); a plain wait where process groups are not used."""
    if not _GROUPS:
        proc.wait()
        return
    while True:
        try:
            os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
            return
        except InterruptedError:
            continue
        except ChildProcessError:  # reaped already
            return


def _stop_workers(workers: list[Worker]) -> None:
    for proc, err in workers:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()
        err.close()
    workers.clear()


class WarmTracers:
    """Trace workers started ahead of need, for callers that trace again and again.

    :meth:`take` hands out a waiting worker (or starts one when none is left, or the one
    waiting has died); :meth:`replenish`, called after each trace, starts replacements so
    that ``spares`` wait for the next one. Nothing starts before the first trace: a caller
    that never traces costs nothing. Each waiting worker holds the memory of an imported
    torch (a few hundred MB). :meth:`close` stops the waiting ones (also done when the object
    is collected); a worker whose parent exits reads end-of-file on stdin and exits too.
    Thread-safe.
    """

    def __init__(self, spares: int = 1) -> None:
        if spares < 0:
            raise ValueError(f"spares must be >= 0, got {spares}")
        self.spares = spares
        self.started = 0
        """Workers started so far (for tests and metrics)."""
        self.warm_takes = 0
        """Traces that got a worker that was already waiting."""
        self._waiting: list[Worker] = []
        self._lock = threading.Lock()
        self._closed = False
        self._finalizer = weakref.finalize(self, _stop_workers, self._waiting)

    def take(self) -> Worker:
        """A worker past its start-up if one is waiting, else a fresh one; the caller owns
        it (writes the request, reads the replies, waits for it, closes its stderr file)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("these warm tracers are closed")
            worker: Worker | None = None
            while self._waiting and worker is None:
                candidate = self._waiting.pop(0)
                if candidate[0].poll() is None:
                    worker = candidate
                    self.warm_takes += 1
                else:
                    _stop_workers([candidate])
            if worker is None:
                worker = _start_worker()
                self.started += 1
            return worker

    def replenish(self) -> None:
        """Start workers until ``spares`` wait (:func:`trace` calls it once its worker has
        finished, so a replacement does not compete with the trace for the CPU)."""
        with self._lock:
            while not self._closed and len(self._waiting) < self.spares:
                self._waiting.append(_start_worker())
                self.started += 1

    def waiting(self) -> list[int]:
        """The process ids of the workers waiting now."""
        with self._lock:
            return [proc.pid for proc, _ in self._waiting]

    def close(self) -> None:
        """Stop the waiting workers; :meth:`take` refuses from now on."""
        with self._lock:
            self._closed = True
            _stop_workers(self._waiting)


def trace(
    req: TraceRequest,
    progress: Progress | None = None,
    timeout_s: float = 1800.0,
    workers: WarmTracers | None = None,
) -> list[StepTrace]:
    """Trace every batch size of ``req`` in one subprocess; one :class:`StepTrace` each.
    ``workers``: take the subprocess from these (one already started) instead of starting it.
    The subprocess is killed after ``timeout_s`` seconds (a :class:`DataError`).

    Raises :class:`SpecError` for a bad model reference or flag, :class:`DataError` when the
    traced program itself fails (with the worker's last error lines).
    """
    validate(req)
    if not req.sys_path:
        req = TraceRequest(
            **{**req.to_json(), "batch_sizes": req.batch_sizes, "sys_path": (os.getcwd(),)}
        )
    proc, err = workers.take() if workers is not None else _start_worker()
    with err:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps(req.to_json()))
            proc.stdin.close()
        except BrokenPipeError:  # it died before reading: reported below with its stderr
            # closed all the same (a request longer than the write buffer failed in write(),
            # and the pipe stayed open); its unsent rest fails the close's flush again
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.close()
        result: list[StepTrace] | None = None
        error: dict[str, str] | None = None
        expired = threading.Event()

        def expire() -> None:  # a hung factory never closes its output: stop it here
            expired.set()
            _kill_group(proc)

        watchdog = threading.Timer(timeout_s, expire)
        watchdog.daemon = True
        watchdog.start()
        try:
            for line in proc.stdout:
                try:
                    msg = json.loads(line)
                except ValueError:
                    # a reply cut off (the worker killed while it wrote, by the timeout or for
                    # its memory): no answer; reported below as the worker's exit
                    continue
                if "progress" in msg and progress is not None:
                    p = msg["progress"]
                    progress(p["done"], p["total"], p["batch_size"])
                elif "result" in msg:  # the last reply: a process the factory forked may
                    result = [StepTrace.from_json(r) for r in msg["result"]]
                    break  # hold the pipe open for good
                elif "error" in msg:
                    error = msg["error"]
                    break
            _wait_unreaped(proc)  # (the watchdog kills it at the timeout)
        finally:
            watchdog.cancel()
            _kill_group(proc)  # what the factory started and left running, too
            proc.wait()
            proc.stdout.close()
        if workers is not None:
            workers.replenish()
        if result is None and expired.is_set():
            raise DataError(f"tracing {req.model_ref} timed out after {timeout_s:g} s")
        if error is not None and error.get("kind") == "spec":
            raise spec_error_from_reply(error)
        if result is None:
            err.seek(0)
            tail = "".join(err.readlines()[-15:])
            why = error["message"] if error else f"the tracer exited with status {proc.returncode}"
            raise DataError(f"tracing {req.model_ref} failed: {why}\n{tail}")
    if progress is not None:
        progress(len(req.batch_sizes), len(req.batch_sizes), req.batch_sizes[-1])
    return result
