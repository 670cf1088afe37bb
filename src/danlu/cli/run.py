"""``danlu run -- COMMAND...``: run one command as a job and stay attached to it, as Slurm's
``srun`` does: no spec file, the job's output streamed here, the job's exit code as the
command's, Ctrl-C cancelling the job.

The job starts in the current directory (``workdir``; ``--workdir`` for another), which must
exist on the node that runs it: a shared file system for a Slurm or Ray cluster. The caller's
environment is not passed on (a spec is stored, and may go to another machine): ``--env
NAME=VALUE``, or ``--env NAME`` for the value here. A failed command is not restarted unless
``--max-restarts`` says so (a submitted job's default is 3): its exit code comes back at once.
What the submission tells (whole GPUs for a ``--gpu-memory auto`` not estimated, and why)
follows the line that names the job, on ``danlu: note:`` lines of stderr.

Whatever ends ``danlu run`` before its job has finished cancels the job, so that it does not
hold GPUs for no one: Ctrl-C (exit 130), a closed terminal (SIGHUP, 129), ``kill`` (SIGTERM,
143) or the reader of its output gone (``danlu run ... | head``: 141, as SIGPIPE), each exit
128 + the signal, as a shell gives; output that cannot be written (a full disk, an I/O
error) exits 2, as the command's other errors do. A signal that comes while the submission
is on its way waits for its answer, then cancels the job; a second one leaves at once, naming
the job to look for. A control-plane restart is waited out (the client reconnects, resuming
the output from the last byte written); a server that stays away ends ``danlu run`` with 2,
saying that its job may still be running.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from danlu.cli.jobs import connect, err, fail
from danlu.cli.markup import after_state, as_text, submitted_notes
from danlu.cli.options import HomeOpt, TokenOpt, UrlOpt, int_option, path_of, refuse_empty
from danlu.cli.output import PIPE_CLOSED, quiet_stdout, stderr_written, write_bytes
from danlu.cli.override_flags import EnvOpt
from danlu.cli.spec_build import set_path, spec_body
from danlu.cli.spec_flags import FlagWrite, flag_error, flag_writes, named_by_flag
from danlu.client import Client
from danlu.client.errors import ApiError
from danlu.config import caller_env
from danlu.core.errors import DanluError, SpecError
from danlu.core.state import JobState
from danlu.core.values import control_character

FAILED_WITHOUT_CODE = 1
"""The exit code of a job that ended without an exit code of its own: cancelled before its
command ran, failed to launch, lost with its node. A command that a signal ended (stopped
at its time limit, killed for memory) has one: 128 + the signal, as a shell (and Slurm's
``srun``) gives, e.g. 143 after the time limit's SIGTERM, 137 after a SIGKILL."""
OUTPUT_FAILED = 2
"""The exit code once the output cannot be written (a full disk, an I/O error; which cancels
the job), as the command's other errors give."""
STOP_SIGNALS = (signal.SIGHUP, signal.SIGTERM)
"""The signals that cancel the job as Ctrl-C does (the terminal closed, ``kill``); the exit
code is 128 + the signal."""


class Stopped(BaseException):
    """Raised in the main thread by a :data:`STOP_SIGNALS` handler (a BaseException, as
    KeyboardInterrupt is, so that no ``except Exception`` on the way swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class OutputFailed(DanluError):
    """Writing the job's output to stdout failed otherwise than by its reader going (a full
    disk, an I/O error); ``error`` is the :class:`OSError`."""

    def __init__(self, error: OSError) -> None:
        super().__init__(error)
        self.error = error


class Abandoned(BaseException):
    """Raised by :class:`RunSignals` for a second signal while the submission is on its way:
    ``danlu run`` leaves without knowing whether the job was submitted; ``signum`` is the
    first signal's."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class RunSignals:
    """The handler of Ctrl-C and :data:`STOP_SIGNALS` in ``danlu run``. While the submission
    is on its way, a signal is noted (the job it submits is cancelled once its id is known)
    and a second one raises :class:`Abandoned`; once :meth:`attached`, each raises
    :class:`Stopped`."""

    def __init__(self) -> None:
        self.pending: int | None = None
        self.submitting = True

    def __call__(self, signum: int, frame: object) -> None:
        if not self.submitting:
            raise Stopped(signum)
        if self.pending is not None:
            raise Abandoned(self.pending)
        self.pending = signum

    def attached(self) -> None:
        """The job's id is known: a signal noted meanwhile raises :class:`Stopped` now, the
        next ones when they come."""
        self.submitting = False
        if self.pending is not None:
            raise Stopped(self.pending)


def _raise_stopped(signum: int, frame: object) -> None:
    raise Stopped(signum)


@contextmanager
def stop_signals(handler: Any, signals: tuple[int, ...] = STOP_SIGNALS) -> Iterator[None]:
    """While inside, ``signals`` (:data:`STOP_SIGNALS`) go to ``handler`` (then the handlers
    before are back); nothing changes off the main thread, where handlers cannot be set."""
    try:
        before = {sig: signal.signal(sig, handler) for sig in signals}
    except ValueError:  # not the main thread
        before = {}
    try:
        yield
    finally:
        for sig, old in before.items():
            signal.signal(sig, old)


_NOT_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


def job_name(argv: list[str]) -> str:
    """A job name from the command: its program's base name, made a valid name
    (``python3`` for ``/usr/bin/python3``; ``run`` when nothing of it is left)."""
    base = _NOT_NAME.sub("-", Path(argv[0]).name if argv else "").strip("-._")[:63]
    return base or "run"


def environment(items: list[str], here: dict[str, str]) -> dict[str, str]:
    """``--env`` items as the job's environment: ``NAME=VALUE``, or ``NAME`` for its value in
    ``here`` (the caller's environment). A name the spec refuses (empty, or holding a
    control character) is refused here, named by its ``--env``: the spec's refusal names
    only its ``env``, which the user of ``danlu run`` never wrote (nor ``danlu submit``'s
    spec file)."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not name:
            raise flag_error("env", f"--env {item!r}", "write NAME=VALUE or NAME")
        char = control_character(name)
        if char is not None:
            raise flag_error(
                "env",
                f"--env {item!r}",
                "a variable name must not contain control characters (line breaks, tabs, "
                f"ESC sequences, bidirectional overrides), got {char!r}: write it without them",
            )
        if not sep:
            if name not in here:
                raise flag_error(
                    f"env.{name}", f"--env {item!r}", f"not set here; write --env {name}=VALUE"
                )
            value = here[name]
        out[name] = value
    return out


def run_body(
    argv: list[str],
    *,
    name: str | None,
    workdir: Path,
    env: dict[str, str],
    options: dict[str, Any],
) -> dict[str, Any]:
    """The job spec ``danlu run`` submits, validated here: ``options`` are dotted fields
    (``resources.gpus``) set when not None. A refused field a flag gave is named by that
    flag (:func:`run_writes`: ``--name: ...``, ``--env SEED: ...``)."""
    if not argv:
        raise SpecError("command", "give the command after --, e.g. danlu run -- python train.py")
    data: dict[str, Any] = {
        "name": name or job_name(argv),
        "command": list(argv),
        "workdir": str(workdir.expanduser().absolute()),
    }
    if env:
        data["env"] = env
    for key, value in options.items():
        if value is not None:
            set_path(data, key, value)
    try:
        return spec_body(data)
    except SpecError as exc:
        raise named_by_flag(exc, run_writes(name, env, options)) from None


def run_writes(name: str | None, env: dict[str, str], options: dict[str, Any]) -> list[FlagWrite]:
    """What ``danlu run``'s flags wrote into its spec (``--name`` when given, ``options``,
    ``--env``'s variables), by which a refusal of a field they gave, local or the server's,
    is named (:func:`~danlu.cli.spec_flags.named_by_flag`)."""
    return flag_writes({**options, "name": name}, (), env)


def exit_code(job: dict[str, Any]) -> int:
    """The command's exit code for a finished job: 0 when it succeeded, its own non-zero code
    when it has one (128 + N when signal N ended it), else :data:`FAILED_WITHOUT_CODE`."""
    if job.get("state") == JobState.SUCCEEDED.value:
        return 0
    code = job.get("exit_code")
    return code if isinstance(code, int) and 0 < code < 256 else FAILED_WITHOUT_CODE


def attach(client: Client, job_id: str) -> int:
    """Stream the job's output until it ends; its exit code (:func:`exit_code`)."""
    for chunk in client.follow_log_bytes(job_id):
        _write(chunk)
    job = client.get_job(job_id)
    state = str(job.get("state"))
    if state != JobState.SUCCEEDED.value:
        reason = client.why(job_id).get("reason") or ""
        say(f"danlu: job {job_id} {state}{after_state(state, reason)}")
    return exit_code(job)


def _write(data: bytes) -> None:
    """The job's bytes on stdout as they are, now; :class:`BrokenPipeError` once its reader
    has gone, :class:`OutputFailed` for any other error writing them."""
    try:
        write_bytes(data)
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise OutputFailed(exc) from None


def run(
    command: Annotated[
        list[str] | None, typer.Argument(help="The command and its arguments, after --.")
    ] = None,
    name: Annotated[
        str | None, typer.Option("--name", help="Job name (default: the program's).")
    ] = None,
    gpus: Annotated[str | None, typer.Option("--gpus", help="GPUs: 2 or a range 1..4.")] = None,
    gpu_memory: Annotated[
        str | None, typer.Option("--gpu-memory", help="Per-GPU memory, e.g. 20GiB or auto.")
    ] = None,
    project: Annotated[str | None, typer.Option("--project", help="Project (queue).")] = None,
    priority: Annotated[
        int | None,
        int_option("--priority", help="Priority.", example="10"),
    ] = None,
    time_limit: Annotated[
        str | None,
        typer.Option("--time-limit", help="Stop the job once it has run this long: 90m, 2h."),
    ] = None,
    max_restarts: Annotated[
        int,
        int_option(
            "--max-restarts", help="Restarts after a failure (default 0: none).", example="3", low=0
        ),
    ] = 0,
    env: EnvOpt = None,
    workdir: Annotated[
        Path | None,
        typer.Option(
            "--workdir",
            help="Where the command starts (default: here).",
            parser=path_of("--workdir", "give a directory, or leave --workdir out for this one"),
        ),
    ] = None,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Run a command as a job and stay attached: its output here, its exit code as this
    command's, Ctrl-C cancels it. Example: danlu run --gpus 2 -- python train.py --lr 0.1"""
    argv = list(command or [])
    options: dict[str, Any] = {
        "resources.gpus": gpus,
        "resources.gpu_memory": gpu_memory,
        "project": project,
        "priority": priority,
        "time_limit": time_limit,
        "max_restarts": max_restarts,
    }
    try:
        # "" was read as none given: the job took the program's name (--name "$N", N unset)
        refuse_empty("--name", name, "give a job name, or leave --name out for the program's")
        variables = environment(list(env or []), caller_env())
        workdir = _here() if workdir is None else workdir
        body = run_body(argv, name=name, workdir=workdir, env=variables, options=options)
    except DanluError as exc:
        raise fail(exc) from None
    writes = run_writes(name, variables, options)
    with connect(home, url, token) as client:
        signals = RunSignals()
        job_id: str | None = None
        try:
            with stop_signals(signals, (signal.SIGINT, *STOP_SIGNALS)):
                try:
                    made = client.submit(body)
                except ApiError as exc:  # a field a flag gave, named by it (--env SEED: ...)
                    raise named_by_flag(exc, writes) from None
                job_id = str(made["id"])
                say(f"danlu: job {job_id} submitted (Ctrl-C cancels it)")
                for note in submitted_notes(made)[1]:  # whole GPUs for a memory not estimated
                    say(f"danlu: note: {note}")
                signals.attached()
                code = attach(client, job_id)
        except Abandoned as gone:
            raise typer.Exit(code=abandoned(str(body["name"]), 128 + gone.signum)) from None
        except (KeyboardInterrupt, Stopped) as stop:
            signum = stop.signum if isinstance(stop, Stopped) else signal.SIGINT
            if job_id is None:  # no handler could be set: not the main thread
                raise typer.Exit(code=abandoned(str(body["name"]), 128 + signum)) from None
            raise typer.Exit(code=cancel(client, job_id, 128 + signum)) from None
        except BrokenPipeError:
            quiet_stdout()
            raise typer.Exit(code=cancel(client, str(job_id), PIPE_CLOSED)) from None
        except OutputFailed as failed:
            quiet_stdout()
            why = f"cannot write the output ({failed.error.strerror or failed.error})"
            raise typer.Exit(code=cancel(client, str(job_id), OUTPUT_FAILED, why)) from None
        except DanluError as exc:
            if job_id is not None:  # attached, then the server lost for good
                say(
                    f"danlu: job {job_id} may still be running; "
                    f"cancel it with `danlu cancel {job_id}`"
                )
            raise fail(exc) from None
    raise typer.Exit(code=code)


def _here() -> Path:
    """The current directory, the job's default ``workdir``; a :class:`SpecError` when it
    has been removed."""
    try:
        return Path.cwd()
    except FileNotFoundError:
        raise SpecError(
            "workdir",
            "the current directory no longer exists; cd to one that does, or pass --workdir DIR",
        ) from None


def abandoned(name: str, code: int) -> int:
    """Say that ``danlu run`` is leaving before its submission was answered (a second
    signal), naming the job to look for; returns ``code``."""
    say(
        f"danlu: left before the server answered; job {name!r} may have been submitted: "
        f"find it with `danlu ls --name {name}` and cancel it with `danlu cancel JOB`"
    )
    return code


def say(text: str) -> None:
    """A line of text (not markup) on stderr, whole; nothing when stderr has gone (the
    terminal closed). Its control characters are written as escapes (``\\x1b``, ``\\n``): a
    job's state reason, server text quoting a node's, is shown, never acted on."""
    with stderr_written():
        err.print(as_text(text), highlight=False, soft_wrap=True)


def cancel(client: Client, job_id: str, code: int, why: str = "") -> int:
    """Cancel the job ``danlu run`` is leaving and say so, in one line (with ``why`` it is
    leaving, when given); returns ``code``. A second SIGHUP or SIGTERM meanwhile (a closing
    terminal sends more) is ignored. A second Ctrl-C (the cancel waiting on a slow server)
    leaves at once, as one during the submission does, naming the job and how to cancel
    it: it escaped as a bare KeyboardInterrupt, the job perhaps left running with no word
    of it."""
    lead = f"danlu: {why}; " if why else "danlu: "
    with stop_signals(signal.SIG_IGN):
        try:
            client.cancel(job_id)
            say(f"{lead}job {job_id} cancelled")
        except DanluError as exc:  # it finished meanwhile, or the server is gone
            say(f"{lead}job {job_id} not cancelled: {exc}")
        except KeyboardInterrupt:
            say(
                f"{lead}left before the cancel was answered; job {job_id} may still be "
                f"running: cancel it with `danlu cancel {job_id}`"
            )
    return code


def register(app: typer.Typer) -> None:
    """Add ``run``."""
    app.command(
        name="run", context_settings={"allow_interspersed_args": False}, no_args_is_help=True
    )(run)
