"""The task a Slurm job of danlu runs on each of its nodes (one ``srun`` task per node).

Run as ``python -I slurm_task.py RUN_DIR`` by the batch script the
:class:`~danlu.executors.slurm.SlurmExecutor` writes; standard library only, so it runs on
any node whose Python can read the run directory (a shared filesystem). It reads
``RUN_DIR/task.json``, written by the executor::

    {"command": [...], "env": {...}, "workdir": "/path" | null,
     "devices": {"node": "0,1", ...}, "nodes": ["node", ...], "master_addr": "host",
     "master_port": 29500, "log_path": "/home/logs/JOB.log", "log_max_bytes": N}

and starts the job's command on this node with ``env`` (the job's environment, written by the
executor), Slurm's own ``SLURM*`` variables of this task, the job's ``DANLU_TOKEN`` (exported
alone by ``sbatch``, never written to disk), and

- ``CUDA_VISIBLE_DEVICES``: this node's GPUs of the allocation (``devices``), which danlu's
  scheduler chose (the job asks Slurm for no GPUs: danlu owns the partition's GPUs);
- torchrun's settings as ``PET_*`` variables (``PET_NNODES``, ``PET_NODE_RANK``: this node's
  place in ``nodes``, danlu's order, whose first is at ``master_addr``, not Slurm's
  ``SLURM_NODEID``; ``PET_NPROC_PER_NODE``, ``PET_MASTER_ADDR``, ``PET_MASTER_PORT``), so
  that a plain ``torchrun train.py`` joins the job's other nodes;

Slurm signals every process of the step when the job is preempted or cancelled, the job's
included; this task ignores SIGTERM itself and waits, for the command and then for the rest
of its process group: a ``/bin/sh -c`` wrapper dies of the SIGTERM at once while the program
it started still writes its checkpoint, and Slurm kills what is left of the step once this
task has exited (the executor's SIGKILL at the end of the grace ends both). A stop recorded
before the command started, whose SIGTERM reached none of its processes, is sent to the
command once started (:func:`stop_asked`). It writes the
job's exit on this node to ``RUN_DIR/exit-NODE.json`` (``{"exit_code": N, "finished_at":
T}``; ``128 + S`` for a death from signal S) and exits with that status, which ``srun`` and
the batch script pass on; but for a checkpoint (exit 75, once recorded), for which it exits 0:
``srun --kill-on-bad-exit`` would end the other nodes with Slurm's ``KillWait`` as their grace,
in the middle of their checkpoints. After a stop danlu asked for, every node is checkpointing
already; after a SIGTERM to this node alone (a node shutting down, a ``kill``), the executor
stops the others as a preemption, with the job's grace, when it finds this record
(:func:`danlu.executors.slurm_stops.gang_stop`).

The task is the *child subreaper* of what the command starts (``PR_SET_CHILD_SUBREAPER``, as
the local executor's supervisor and the Ray executor's guard are): a process the command
started in a session of its own (a daemon: ``setsid``) stays its descendant when its parent
exits, and once the command has exited (and, after a stop, the rest of its process group) every
descendant left is SIGKILLed before the exit is recorded, so that no daemon of the job's runs on
GPUs danlu counts free, nor keeps the job's output open (``srun`` waits for it to close).
Slurm's proctrack plugins miss such a daemon (``proctrack/pgid`` looks at the process group,
``proctrack/linuxproc`` at the process tree, which it left when its parent exited). It uses
:mod:`~danlu.executors.orphan_guard`'s helpers, loaded from its own folder: this script runs
under ``python -I``, where danlu need not be importable.

The job's log (``log_path``, ``sbatch --output`` with ``--open-mode=append``) is one file for
the whole run: the batch step's ``slurmstepd`` opens it on the run's first node (Slurm's batch
host, the step's node 0), the batch script writes to it, and ``srun`` there appends what every
node's task writes, forwarded to it. The task of node 0 (``SLURM_NODEID``), on the host of
that one writer, keeps it under ``log_max_bytes`` (``DANLU_LOG_MAX_MB``; none when the task
has none) as the local executor's supervisor does
(:class:`~danlu.executors.logcap.LogCap`, checked every :data:`CHECK_SECONDS` while the
command runs, and while the rest of its process group checkpoints after a stop): past the
cap, its newest part moves to ``JOB_ID.log.1`` and the log starts anew with a line saying so.
The other nodes' tasks leave it alone: one file, one capper.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

TASK = "task.json"
PREEMPTED_EXIT_CODE = 75
"""What a job exits with after it checkpointed (``danlu.executors.base``'s; this script
imports no module of danlu's package, see :func:`_load_orphan_guard`)."""
CHECK_SECONDS = 0.5
"""How often the task collects the exits of the orphans re-parented to it, and checks the
log's size (:func:`log_cap`), while the command runs."""


def _load_orphan_guard() -> ModuleType:
    """``orphan_guard.py`` of this file's folder, loaded from its file (this script runs under
    ``python -I``, where danlu need not be importable, and may be another copy); it loads
    :mod:`~danlu.executors.supervise` the same way, as its attribute ``supervise``."""
    spec = importlib.util.spec_from_file_location(
        "_danlu_task_orphan_guard", Path(__file__).with_name("orphan_guard.py")
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load orphan_guard.py next to {__file__}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if TYPE_CHECKING:
    from danlu.executors import logcap, orphan_guard, supervise
else:
    orphan_guard = _load_orphan_guard()
    supervise = orphan_guard.supervise
    logcap = supervise.logcap  # loaded from its file next to supervise.py, as supervise is


def is_plain_name(name: object) -> bool:
    """Whether ``name`` can be part of a file name in a run directory: a non-empty string with
    no ``/`` or NUL that is not ``.`` or ``..`` (a path segment of its own, nothing that
    leads out of the directory)."""
    return (
        isinstance(name, str)
        and name not in {"", ".", ".."}
        and "/" not in name
        and "\0" not in name
    )


def exit_path(run_dir: Path, node: str) -> Path:
    """Where the task on ``node`` records the job's exit there. Raises ``ValueError`` for a
    ``node`` that is not a plain name (:func:`is_plain_name`): ``exit-a/b.json`` would be a
    file in another directory, not the run directory's."""
    if not is_plain_name(node):
        raise ValueError(
            f"node name {node!r} is not a plain name (no '/', not '.' or '..', not empty); "
            "a run's exit files are named after their node"
        )
    return run_dir / f"exit-{node}.json"


def task_env(task: dict[str, object], env: dict[str, str]) -> dict[str, str]:
    """The job's environment on the node Slurm names in ``env`` (this process's:
    ``SLURMD_NODENAME``, ``SLURM_NODEID``, ``DANLU_TOKEN``). This node's own ``SLURM*``
    variables win over the task's: its ``env`` can hold a ``SLURMD_NODENAME`` (the executor
    drops only ``SLURM_*``), the control plane's own when it runs in a Slurm job, which
    named every node as that one (the wrong GPUs, rank and exit record on each)."""
    given = task.get("env")
    own = {k: v for k, v in env.items() if k.startswith("SLURM")}
    out: dict[str, str] = {}
    if isinstance(given, dict):
        out.update({str(k): str(v) for k, v in given.items()})
    out.update(own)
    if "DANLU_TOKEN" in env:
        out["DANLU_TOKEN"] = env["DANLU_TOKEN"]
    node = env.get("SLURMD_NODENAME", "")
    devices = task.get("devices")
    visible = devices.get(node, "") if isinstance(devices, dict) else ""
    out["CUDA_VISIBLE_DEVICES"] = str(visible)
    nodes = task.get("nodes")
    count = max(1, len(nodes)) if isinstance(nodes, list) else 1  # none: Slurm picks one
    out["PET_NNODES"] = str(count)
    if isinstance(nodes, list) and node in nodes:
        out["PET_NODE_RANK"] = str(nodes.index(node))
    else:
        out["PET_NODE_RANK"] = env.get("SLURM_NODEID", "0")
    out["PET_NPROC_PER_NODE"] = str(max(1, len([d for d in str(visible).split(",") if d])))
    out["PET_MASTER_ADDR"] = str(task.get("master_addr", "127.0.0.1"))
    out["PET_MASTER_PORT"] = str(task.get("master_port", 29500))
    return out


def stop_asked(run_dir: Path) -> bool:
    """Whether a stop of the run is recorded (``RUN_DIR/stop.json`` with a ``reason``, which
    the executor writes before it sends the stop's SIGTERM). Read before the command starts:
    Slurm sends a SIGTERM only to the processes of the job's steps running then, so one sent
    before this task ran (the job in its ``Prolog``, which Slurm reports ``RUNNING``, or its
    step being launched) reached no process of the command's, and the command would have run
    on to the SIGKILL at the end of the stop's grace. The task sends it to the command as soon
    as it is started, as it does a SIGTERM that reached the task itself before then."""
    stop = supervise.read_json(run_dir / supervise.STOP)
    return stop is not None and "reason" in stop


def log_cap(task: dict[str, object], env: dict[str, str]) -> logcap.LogCap | None:
    """The cap this node's task keeps on the job's log (the task's ``log_path`` and
    ``log_max_bytes``), the log opened for it; None when the task sets none, or this is not
    the run's node 0 (``SLURM_NODEID`` in ``env``, this process's; none: a task alone), or
    the log cannot be opened as the regular file it is (a link the job put there is never
    followed, :func:`~danlu.executors.supervise.open_regular`; said on stderr). See the
    module's docstring for why one node's task alone keeps it."""
    path = task.get("log_path")
    if env.get("SLURM_NODEID", "0") != "0" or not isinstance(path, str):
        return None
    if logcap.log_cap_bytes(task) is None:
        return None
    try:
        opened = supervise.open_regular(path, os.O_WRONLY | os.O_APPEND)
    except OSError as exc:
        opened = f"cannot be opened ({exc.strerror or exc})"
    if isinstance(opened, str):
        _said(f"the log {path} is not capped: it {opened}")
        return None
    cap = logcap.LogCap.of(
        task, lambda kept: supervise.atomic_file(kept, sync=False), opened, _said
    )
    if cap is None:
        os.close(opened)
    return cap


def _said(message: str) -> None:
    with contextlib.suppress(OSError):
        print(f"danlu: {message}", file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    """Run the job's command on this node; return its exit status."""
    if len(argv) != 2:
        print("usage: slurm_task.py RUN_DIR", file=sys.stderr)
        return 2
    run_dir = Path(argv[1])
    task = supervise.read_json(run_dir / TASK)
    if task is None:  # missing, not JSON, or not an object: nothing to run
        print(f"danlu: no readable task in {run_dir / TASK}", file=sys.stderr)
        return 2
    command = task.get("command")
    if not isinstance(command, list) or not command or not all(isinstance(a, str) for a in command):
        print(f"danlu: {run_dir / TASK} has no command", file=sys.stderr)
        return 2
    env = task_env(task, dict(os.environ))
    node = env.get("SLURMD_NODENAME", "node")
    stopped: list[int] = []

    def note(signum: int, _frame: object) -> None:
        stopped.append(signum)

    # a handler, not SIG_IGN: handlers are reset in the child at exec, an ignore is inherited
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, note)
    workdir = task.get("workdir")
    capped = log_cap(task, dict(os.environ))
    subreaper = supervise.set_subreaper()
    asked = stop_asked(run_dir)
    try:
        cwd = workdir if isinstance(workdir, str) else None
        child = subprocess.Popen(command, env=env, cwd=cwd)
    except OSError as exc:
        print(f"danlu: {_start_error(command[0], cwd, node, exc)}", file=sys.stderr, flush=True)
        code = 127
    else:
        if asked or stopped:  # its SIGTERM reached no process of the command's: sent now
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signal.SIGTERM)
            stopped.append(signal.SIGTERM)
        code = _wait(child, stopped, subreaper, capped)
    if capped is not None:
        os.close(capped.fd)
    orphan_guard.end_descendants(subreaper)
    # The job is over: a SIGTERM from now on (the gang stop this record brings, sent to the
    # whole step) is ignored. A Python handler would be reset to the default as the
    # interpreter finalizes, and the task would die of the SIGTERM, which srun's
    # --kill-on-bad-exit takes for a failure, killing the nodes still checkpointing.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    record = {"exit_code": code, "finished_at": time.time()}
    try:
        # the run directory is the job's to write: the record goes through a temporary file
        # of a name no one can foresee, made exclusively and never through a link the job
        # put there (write_json), then renamed over the record's name
        supervise.write_json(exit_path(run_dir, node), record)
    except (OSError, ValueError) as exc:  # the exit still reaches Slurm through the status
        print(f"danlu: cannot record the exit on {node}: {exc}", file=sys.stderr, flush=True)
        return code
    # a checkpoint is no failure for srun, whose --kill-on-bad-exit would kill the other nodes
    # after Slurm's KillWait: the executor stops them (a stop of its own, or the gang stop
    # this record brings) with the job's grace. A task alone keeps its 75 for Slurm: a run
    # without GPUs names no node (Slurm picks it), and its exit reaches the executor there.
    nodes = task.get("nodes")
    alone = not isinstance(nodes, list) or len(nodes) < 2
    return 0 if code == PREEMPTED_EXIT_CODE and not alone else code


def _start_error(program: str, workdir: str | None, node: str, exc: OSError) -> str:
    """What the task says when the command could not be started on ``node`` (``exc``): that
    it cannot enter ``workdir`` when that failed (``Popen`` names the directory as the
    error's file then, as it names the program when that could not be run), not that
    ``program`` is missing."""
    if workdir is not None and exc.filename == workdir != program:
        return (
            f"cannot enter the workdir {workdir!r} on {node}: {exc.strerror}; create it there, "
            "or submit the job again with a workdir that exists"
        )
    return f"cannot start {program!r} on {node}: {exc}"


def _wait(
    child: subprocess.Popen[bytes],
    stopped: list[int],
    subreaper: bool,
    capped: logcap.LogCap | None = None,
) -> int:
    """The command's exit status (``128 + N`` after signal N), once it has exited and, when
    the task was signalled (``stopped``), the rest of its process group too: a shell wrapper
    dies of the SIGTERM at once while the program it started still checkpoints. Meanwhile the
    exits of the orphans re-parented to this process (``subreaper``) are collected, and the
    log is kept under its cap (``capped``: :func:`log_cap`)."""
    while True:
        try:
            returned = child.wait(CHECK_SECONDS)
            break
        except subprocess.TimeoutExpired:
            if subreaper:
                orphan_guard.reap(but=child.pid)
            if capped is not None:
                capped.check()
    while stopped and orphan_guard.others_in_group():  # the rest may be checkpointing
        orphan_guard.reap()
        if capped is not None:
            capped.check()
        time.sleep(0.05)
    return returned if returned >= 0 else 128 - returned


if __name__ == "__main__":
    sys.exit(main(sys.argv))
