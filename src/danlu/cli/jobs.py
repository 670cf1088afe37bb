"""Job and cluster commands over the REST client: ``danlu submit / wait / ls / show / logs /
cancel / why / nodes / top``.

Every command takes ``--home DIR`` (else ``DANLU_HOME``, else ``~/.danlu``) to find the server
started by ``danlu up`` and its admin token; ``--url`` / ``--token`` (or ``DANLU_URL`` /
``DANLU_TOKEN``) override. Errors print one line and exit with code 2.

``ls`` and ``show`` live in :mod:`danlu.cli.job_views`, the building of a spec to submit in
:mod:`danlu.cli.spec_build`; this module holds what the commands share (the client, the
consoles, the error and JSON output) and registers them all.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import RenderableType
from rich.live import Live

from danlu.cli import job_views, waiting
from danlu.cli import top as top_view
from danlu.cli import usage as usage_cli
from danlu.cli.fitted_table import print_whole
from danlu.cli.job_table import gpus_of
from danlu.cli.log_attempts import attempt_marks
from danlu.cli.markup import (
    OutputUnwritable,
    after_state,
    as_text,
    note_lines,
    submitted_notes,
)
from danlu.cli.markup import console as cli_console
from danlu.cli.options import (
    HomeOpt,
    JobArg,
    JsonOpt,
    TokenOpt,
    UrlOpt,
    error_line,
    float_option,
    int_option,
    path_of,
    refuse_empty,
)
from danlu.cli.options import (
    fail as fail,  # re-exported: the commands' modules call common.fail
)
from danlu.cli.output import PIPE_CLOSED, quiet_stdout, stdout_written, write_bytes
from danlu.cli.spec_build import JOB_SPEC_FIX, apply_flags, build_spec
from danlu.cli.spec_build import (  # re-exported: their import path before the module split
    set_path as set_path,
)
from danlu.cli.spec_build import (
    set_value as set_value,
)
from danlu.cli.spec_build import (
    spec_body as spec_body,
)
from danlu.cli.spec_flags import FlagValueError, by_after, by_flag, flag_error
from danlu.client import Client
from danlu.client.errors import ApiError, InvalidRequestError, NoServerError
from danlu.client.rest import read_across_restart
from danlu.config import caller_env, load_client_settings
from danlu.core.errors import DanluError, SpecError
from danlu.core.job_array import array_sweep, parse_array
from danlu.core.state import JobState
from danlu.core.sweep import parse_sweep
from danlu.core.units import format_duration
from danlu.core.values import visible

console = cli_console()
err = cli_console(stderr=True)

ClientFactory = Callable[[Path | None, str | None, str | None], Client]


def default_client(home: Path | None, url: str | None, token: str | None) -> Client:
    """A client from the flags, then ``DANLU_*`` (via danlu.config), then the home's files.
    A token given without a URL, and no server in the home to take the URL from (a user of
    a shared control plane, given only a token), is told to give the URL: it was told to
    start a server with ``danlu up``."""
    settings = load_client_settings(home, url, token)
    try:
        return Client.from_home(settings.home, url=settings.url, token=settings.token)
    except NoServerError as exc:
        if settings.token is None or settings.url is not None:
            raise
        raise NoServerError(
            "no server URL for the API token given (--token, DANLU_TOKEN): set DANLU_URL, or "
            "pass --url, to the control plane's address, e.g. http://HOST:8470 (and no local "
            f"server: {exc})"
        ) from None


client_factory: ClientFactory = default_client
"""How commands build their client; tests replace it (e.g. with an ASGI transport)."""


def connect(home: Path | None, url: str | None, token: str | None) -> Client:
    """The client for one command; a :class:`DanluError` exits with code 2. An empty
    ``--url`` or ``--token`` is refused: it was read as not given, so ``--token "$TOKEN"``
    with the variable unset went on with the home's admin token (``--home``:
    :data:`~danlu.cli.options.HomeOpt`)."""
    try:
        refuse_empty("--url", url, "give the server's URL, or leave --url out for the home's")
        refuse_empty("--token", token, "give an API token, or leave --token out for the home's")
        return client_factory(home, url, token)
    except DanluError as exc:
        raise fail(exc) from None


T = TypeVar("T")


def ask(home: Path | None, url: str | None, token: str | None, request: Callable[[Client], T]) -> T:
    """``request`` made with the command's client; a :class:`DanluError` exits with code 2."""
    with connect(home, url, token) as client:
        try:
            return request(client)
        except DanluError as exc:
            raise fail(exc) from None


SHOWN_PROBLEMS = 10
"""The most of a reply's wrong fields :func:`fail_on` prints (then a count of the others)."""


def fail_on(problems: Sequence[str]) -> None:
    """When the server sent fields of the wrong type (``problems``, from
    :mod:`danlu.cli.reply_fields`; what was shown left them out): print them on stderr and
    exit with code 2."""
    if problems:
        report(problems)
        raise typer.Exit(code=2)


def report(problems: Sequence[str]) -> None:
    """Print the first :data:`SHOWN_PROBLEMS` of ``problems`` on stderr, as errors."""
    for problem in problems[:SHOWN_PROBLEMS]:
        error_line(problem)
    if len(problems) > SHOWN_PROBLEMS:
        error_line(f"and {len(problems) - SHOWN_PROBLEMS} more")


def print_json(value: Any) -> None:
    """JSON on stdout, unstyled (for scripts): :func:`print_plain`."""
    print_plain(json.dumps(value, indent=2, sort_keys=False))


def print_plain(text: str) -> None:
    """``text`` and a line break on stdout, unstyled (for scripts); output that cannot be
    written (a full disk) is an :class:`OutputUnwritable`, which ends the command with an
    error line and exit 2 (:class:`~danlu.cli.main.DanluGroup`, or the command's own
    handling: :func:`~danlu.cli.output.stdout_written`), not a traceback."""
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:  # the reader has gone: exit 141 (cli.main.DanluGroup)
        raise
    except OSError as exc:
        quiet_stdout()
        raise OutputUnwritable(exc.errno, exc.strerror or str(exc)) from None


# -- submit ------------------------------------------------------------------------------------

# The flags that override fields of a job's spec: `danlu submit`'s, over its file, and
# `danlu rerun`'s, over the finished job's spec (:func:`spec_overrides`).
NameOpt = Annotated[str | None, typer.Option("--name", help="Override the job name.")]
PriorityOpt = Annotated[
    int | None, int_option("--priority", help="Override priority.", example="10")
]
ProjectOpt = Annotated[str | None, typer.Option("--project", help="Override project.")]
UserOpt = Annotated[str | None, typer.Option("--user", help="Submit as user (admin).")]
GpusOpt = Annotated[str | None, typer.Option("--gpus", help="GPUs: 2 or a range 1..4.")]
GpuMemoryOpt = Annotated[
    str | None, typer.Option("--gpu-memory", help="Per-GPU memory, e.g. 20GiB or auto.")
]
SetsOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override any field: --set env.SEED=1 (repeatable)."),
]
TimeLimitOpt = Annotated[
    str | None,
    typer.Option(
        "--time-limit", help="Stop the job once it has run this long: 3600, 90m, 04:00:00."
    ),
]
MaxRestartsOpt = Annotated[
    int | None,
    int_option("--max-restarts", help="Restarts after a failure.", example="3", low=0),
]


def spec_overrides(
    *,
    name: str | None = None,
    priority: int | None = None,
    project: str | None = None,
    user: str | None = None,
    gpus: str | None = None,
    gpu_memory: str | None = None,
    time_limit: str | None = None,
    max_restarts: int | None = None,
) -> dict[str, Any]:
    """The spec fields the override flags give, by dotted field (None: not given), as
    :func:`~danlu.cli.spec_build.apply_flags` sets them and
    :func:`~danlu.cli.spec_flags.by_flag` names a refused one's flag."""
    return {
        "name": name,
        "priority": priority,
        "project": project,
        "user": user,
        "resources.gpus": gpus,
        "resources.gpu_memory": gpu_memory,
        "time_limit": time_limit,
        "max_restarts": max_restarts,
    }


def submit(
    spec: Annotated[
        Path,
        typer.Argument(
            help="Job spec file (YAML or JSON).",
            parser=path_of("SPEC", JOB_SPEC_FIX),
        ),
    ],
    name: NameOpt = None,
    priority: PriorityOpt = None,
    project: ProjectOpt = None,
    user: UserOpt = None,
    gpus: GpusOpt = None,
    gpu_memory: GpuMemoryOpt = None,
    sets: SetsOpt = None,
    after: Annotated[
        list[str] | None,
        typer.Option(
            "--after",
            help="Wait for job ID to succeed, or ID:failed|finished|started (repeatable).",
        ),
    ] = None,
    time_limit: TimeLimitOpt = None,
    wait_end: Annotated[
        bool,
        typer.Option("--wait", help="Then wait for the job to finish; exit as danlu wait does."),
    ] = False,
    array: Annotated[
        str | None,
        typer.Option(
            "--array",
            help="Run it once per index, as a job array: 0-99, 1-99:2, 1,3,8; %8 at the end: "
            "at most 8 at once. Each task reads DANLU_ARRAY_INDEX.",
        ),
    ] = None,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Validate a job spec locally, then submit it (with --array, or the spec's `array`, as
    a job array: see `danlu sweep show` for its tasks)."""
    overrides = spec_overrides(
        name=name,
        priority=priority,
        project=project,
        user=user,
        gpus=gpus,
        gpu_memory=gpu_memory,
        time_limit=time_limit,
    )
    after_items = list(after or [])
    try:
        body = build_spec(spec, overrides, list(sets or []), after_items)
        in_spec = body.pop("array", None)
        tasks = parse_array(array, "--array") if array is not None else None
        if tasks is None and in_spec is not None:
            tasks = parse_array(in_spec)
        sweep = None if tasks is None else array_sweep(body, tasks)
        if sweep is not None:
            parse_sweep(sweep)  # what only an array refuses (env.DANLU_ARRAY_INDEX), named here
    except DanluError as exc:
        raise fail(exc, None if isinstance(exc, FlagValueError) else spec) from None
    # --after's entries are depends_on's last: the server's refusal of one names that --after
    after_from = len(body.get("depends_on") or []) - len(after_items)
    if sweep is not None:  # submitted as its sweep, and waited for as one
        shown = _array_submitted
        make_array = _after_named(lambda c: c.submit_sweep(sweep), after_items, after_from)
        _new_job(make_array, wait_end, json_out, home, url, token, shown)
        return
    make = _after_named(lambda client: client.submit(body), after_items, after_from)
    _new_job(make, wait_end, json_out, home, url, token)


def _after_named(
    make: Callable[[Client], dict[str, Any]], after: Sequence[str], after_from: int
) -> Callable[[Client], dict[str, Any]]:
    """``make`` (a submission), its server's refusal of a dependency that ``--after`` added
    (``depends_on.N``, from ``after_from`` on: an id no job has) named by that ``--after``
    (:func:`~danlu.cli.spec_flags.by_after`), not by the index of a list the user never
    wrote."""

    def send(client: Client) -> dict[str, Any]:
        try:
            return make(client)
        except InvalidRequestError as exc:
            raise by_after(exc, after, after_from) from None

    return send


def _new_job(
    make: Callable[[Client], dict[str, Any]],
    wait_end: bool,
    json_out: bool,
    home: Path | None,
    url: str | None,
    token: str | None,
    shown: Callable[[dict[str, Any], bool], None] | None = None,
) -> None:
    """Make a job with ``make`` (a submission, a rerun, or a job array's sweep), print it
    (``shown``, default :func:`_submitted`), and with ``wait_end`` wait for its end (an
    array's: every task's) and exit as ``danlu wait`` does."""
    kind, cancel = ("array", "sweep cancel") if shown is _array_submitted else ("job", "cancel")
    with connect(home, url, token) as client:
        try:
            made = make(client)
        except DanluError as exc:
            raise fail(exc) from None
        except KeyboardInterrupt:
            raise typer.Exit(code=waiting.INTERRUPTED) from None
        if not (json_out and wait_end):
            made_id = visible(str(made["id"]))
            look = "sweep show" if shown is _array_submitted else "show"
            # an error alone read as a refusal: a script sent it again, a second job
            with stdout_written(
                f"{kind} {made_id} was submitted all the same (danlu {look} {made_id})"
            ):
                (shown or _submitted)(made, json_out)
        if not wait_end:
            return
        try:
            code = waiting.wait_jobs(client, [str(made["id"])], None, 2.0, json_out)
        except DanluError as exc:
            raise fail(exc) from None
        except (KeyboardInterrupt, typer.Exit) as exc:
            if isinstance(exc, typer.Exit) and exc.exit_code != waiting.INTERRUPTED:
                raise
            # the waiting stops, not what was made: say which it is (with --json nothing
            # was printed yet)
            ident = as_text(made["id"])  # the server's id: text, never Rich markup
            err.print(
                f"interrupted: {kind} {ident} goes on (danlu wait {ident}; danlu {cancel} {ident})",
                highlight=False,
                soft_wrap=True,
            )
            raise typer.Exit(code=waiting.INTERRUPTED) from None
        raise typer.Exit(code)


def _array_submitted(sweep: dict[str, Any], json_out: bool) -> None:
    if json_out:
        print_json(sweep)
        return
    spec = sweep.get("spec")  # a reply of another server's kind: shown without what it lacks
    parallel = spec.get("parallel") if isinstance(spec, dict) else None
    console.print(
        f"submitted array [bold]{as_text(sweep['id'])}[/bold] ({as_text(sweep.get('name'))}): "
        f"{as_text(sweep.get('total'))} tasks, at most {as_text(parallel)} at once; "
        f"danlu sweep show {as_text(sweep['id'])}",
        highlight=False,
    )
    for note in note_lines(sweep.get("notes")):  # what the submission told of every task
        console.print(note, highlight=False)


def _submitted(job: dict[str, Any], json_out: bool) -> None:
    if json_out:
        print_json(job)
        return
    waits, notes = submitted_notes(job)
    waiting = f", {waits}" if waits else ""
    console.print(
        f"submitted job [bold]{as_text(job.get('id'))}[/bold] ({as_text(job.get('name'))}): "
        + as_text(f"{job.get('state')}{waiting}"),
        highlight=False,
    )
    for note in note_lines(notes):  # as an array's: whole GPUs for a memory not estimated
        console.print(note, highlight=False)


# -- logs / cancel / why -----------------------------------------------------------------------


def logs(
    job: JobArg,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Stream until the job finishes.")
    ] = False,
    separators: Annotated[
        bool | None,
        typer.Option(
            "--separators/--no-separators",
            help="Put a line where each attempt (run) begins: '── attempt 2 (started ...) ──'. "
            "Default: when stdout is a terminal.",
        ),
    ] = None,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Print a job's output (stdout and stderr), its bytes as they are; on a terminal (or
    with --separators) with a line where each attempt (run) after the first begins, as the
    server's executor recorded them. With --follow, a run that starts while following gets
    its line too; the exit status is then danlu wait's: 0 when the job SUCCEEDED, 1 when it
    FAILED or was CANCELLED (said on stderr), 2 for an error (output that cannot be written,
    a full disk, too); 141 once the reader of the output has gone (`| head`), as a shell's
    SIGPIPE."""
    with connect(home, url, token) as client:
        try:
            marks = attempt_marks(client, job, write_bytes, separators, console.is_terminal)
            if not follow:
                for raw in client.read_log_bytes(job):
                    (write_bytes if marks is None else marks.write)(raw)
                if marks is not None:
                    marks.finish()
                return
            for chunk in client.follow_log_bytes(job):
                (write_bytes if marks is None else marks.follow)(chunk)
            if marks is not None:
                marks.finish()
            ended = client.get_job(job)
        except DanluError as exc:
            raise fail(exc) from None
        except KeyboardInterrupt:
            raise typer.Exit(code=waiting.INTERRUPTED) from None
        except BrokenPipeError:  # not 1, which says the job FAILED
            quiet_stdout()
            raise typer.Exit(code=PIPE_CLOSED) from None
        except OSError as exc:  # only stdout's writes raise it (the client's are DanluError)
            quiet_stdout()
            raise fail(f"cannot write the output: {exc.strerror or exc}") from None
    if ended.get("state") != JobState.SUCCEEDED.value:
        status = waiting.end_status(ended)
        err.print(
            f"job {as_text(ended.get('id', job))} ended {as_text(ended.get('state'))}{status}",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(code=waiting.NOT_SUCCEEDED)


def cancel(
    job: JobArg,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Cancel a job (a running job is stopped; a finished one is a conflict)."""
    data = ask(home, url, token, lambda c: c.cancel(job))
    if json_out:
        print_json(data)
        return
    if data.get("state") in STOPPING:  # answered still RUNNING: CANCELLED once the run exits
        _job_line(data, False, "cancelling", "stopping it (SIGTERM, then SIGKILL after its grace)")
        return
    _job_line(data, False, "cancelled")


def rerun(
    job: JobArg,
    name: NameOpt = None,
    priority: PriorityOpt = None,
    project: ProjectOpt = None,
    user: UserOpt = None,
    gpus: GpusOpt = None,
    gpu_memory: GpuMemoryOpt = None,
    time_limit: TimeLimitOpt = None,
    max_restarts: MaxRestartsOpt = None,
    env: Annotated[
        list[str] | None,
        typer.Option("--env", help="NAME=VALUE, or NAME for its value here (repeatable)."),
    ] = None,
    sets: SetsOpt = None,
    wait_end: Annotated[
        bool,
        typer.Option("--wait", help="Then wait for the new job to finish; exit as danlu wait."),
    ] = False,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Submit a finished job again with its spec, as a new job (its dependencies left out;
    from the start, unless its spec names a checkpoint_dir with checkpoints in it), with
    the flags' changes (`danlu submit`'s overrides; --env adds or replaces a variable), which
    the server validates as a submission."""
    from danlu.cli.run import environment  # it imports this module

    overrides = spec_overrides(
        name=name,
        priority=priority,
        project=project,
        user=user,
        gpus=gpus,
        gpu_memory=gpu_memory,
        time_limit=time_limit,
        max_restarts=max_restarts,
    )
    given = list(sets or [])
    try:
        variables = environment(list(env or []), caller_env())
        changes: dict[str, Any] = {"env": variables} if variables else {}  # by name, not path
        apply_flags(changes, overrides, given)  # --set last, as submit applies it
    except DanluError as exc:
        raise fail(exc) from None
    flags = {f"env.{n}": f"--env {n}" for n in variables}

    def make(client: Client) -> dict[str, Any]:
        try:
            return client.rerun(job, changes)
        except ApiError as exc:  # a refused change named by the flag that gave it
            raise _by_flag(exc, overrides, given, flags) from None

    _new_job(make, wait_end, json_out, home, url, token)


def _by_flag(
    exc: ApiError, overrides: dict[str, Any], sets: Sequence[str], flags: dict[str, str]
) -> DanluError:
    """The server's refusal ``exc`` of a field a flag gave, named by that flag
    (:func:`~danlu.cli.spec_flags.by_flag`; ``flags``: more of them, by field); ``exc``
    itself for any other field."""
    field = exc.field or ""
    if field in flags:
        return flag_error(field, flags[field], exc.message)
    named = by_flag(SpecError(field, exc.message), overrides, sets)
    return named if isinstance(named, FlagValueError) else exc


UPDATE_FLAGS = {
    "priority": "--priority",
    "time_limit": "--time-limit",
    "deadline": "--deadline",
    "max_restarts": "--max-restarts",
    "resources.gpus": "--gpus",
    "resources.gpu_memory": "--gpu-memory",
}
"""The ``danlu update`` flag that gives each field ``PATCH /jobs/{id}`` changes."""


def update(
    job: JobArg,
    priority: Annotated[
        int | None,
        int_option(
            "--priority",
            "-p",
            help="New priority.",
            example="10",
            low=-1_000_000,
            high=1_000_000,
        ),
    ] = None,
    time_limit: TimeLimitOpt = None,
    deadline: Annotated[
        str | None,
        typer.Option(
            "--deadline", help="Finish within this long of its submission: 6h, 2-00:00:00."
        ),
    ] = None,
    gpus: GpusOpt = None,
    gpu_memory: GpuMemoryOpt = None,
    max_restarts: MaxRestartsOpt = None,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Change an unfinished job: its priority (the next round ranks it anew), time limit or
    deadline, also while it runs; its GPUs, GPU memory or max restarts while it is PENDING
    (hold a running job first). Validated as a submission; each change is an event."""
    resources = {"gpus": gpus, "gpu_memory": gpu_memory}
    values: dict[str, Any] = {
        "priority": priority,
        "time_limit": time_limit,
        "deadline": deadline,
        "max_restarts": max_restarts,
        **{f"resources.{key}": value for key, value in resources.items()},
    }
    given = [field for field, value in values.items() if value is not None]
    if not given:
        raise fail("nothing to change: give " + ", ".join(UPDATE_FLAGS.values()))
    asked = {key: value for key, value in resources.items() if value is not None}

    def change(client: Client) -> dict[str, Any]:
        try:
            return client.update_job(
                job,
                priority=priority,
                time_limit=time_limit,
                deadline=deadline,
                max_restarts=max_restarts,
                resources=asked or None,
            )
        except ApiError as exc:
            flags = {field: UPDATE_FLAGS[field] for field in given}
            raise _by_flag(exc, {}, (), flags) from None

    data = ask(home, url, token, change)
    if json_out:
        print_json(data)
        return
    shown = ", ".join(_changed_text(data, field) for field in given if "gpu" not in field)
    if gpus is not None or gpu_memory is not None:
        shown += (", " if shown else "") + f"gpus {as_text(gpus_of(data))}"
    console.print(f"job [bold]{as_text(data.get('id'))}[/bold]: {shown}", highlight=False)
    for note in note_lines(data.get("notes")):
        console.print(note, highlight=False)


def _changed_text(job: dict[str, Any], field: str) -> str:
    """A field ``danlu update`` changed, as the reply has it now: ``time_limit 2h``."""
    spec = job.get("spec")
    value = job.get(field) if field in ("priority", "time_limit") else None
    if field in ("deadline", "max_restarts") and isinstance(spec, dict):
        value = spec.get(field)
    duration = field in ("time_limit", "deadline") and not isinstance(value, bool)
    if not (duration and isinstance(value, int | float)):
        return f"{field} {as_text(value)}"
    after = " after its submission" if field == "deadline" else ""
    return f"{field} {format_duration(value)}{after}"


def hold(
    job: JobArg,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Hold a job: it is not scheduled until `danlu release` (a running one is preempted by
    checkpoint first, and resumes from it when released)."""
    data = ask(home, url, token, lambda c: c.update_job(job, held=True))
    stopping = data.get("state") in STOPPING  # preempted by checkpoint in the next round
    _job_line(data, json_out, "held", "stopping it to wait (checkpoint first)" if stopping else "")


def release(
    job: JobArg,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Release a held job: it is queued again (a job that was not held is left as it is,
    and said to be)."""

    def release_job(client: Client) -> tuple[bool, dict[str, Any]]:
        # the API answers 200 for a job that was not held, changing nothing: whether it
        # was is read before, so that such a job is not said to be released
        found = client.get_job(job)
        key = found.get("id")
        return found.get("held_at") is not None, client.update_job(
            key if isinstance(key, str) and key else job, held=False
        )

    was_held, data = ask(home, url, token, release_job)
    if was_held or json_out:
        _job_line(data, json_out, "released")
        return
    console.print(
        f"job [bold]{as_text(data.get('id'))}[/bold] ({as_text(data.get('state'))}) was not "
        "held; nothing to release"
    )


STOPPING = (JobState.RUNNING.value, JobState.PREEMPTING.value)
"""The states in which a job that ``danlu cancel`` or ``danlu hold`` was answered still has
a run, which is being stopped: the API answers the state it is in meanwhile."""


def _job_line(data: dict[str, Any], json_out: bool, what: str, doing: str = "") -> None:
    """``{what} job ID: STATE`` (``--json``: the reply), then ``, {doing}`` where given:
    what happens to the job now, where its state alone read as if nothing had."""
    if json_out:
        print_json(data)
        return
    said = f", {doing}" if doing else ""
    console.print(
        f"{what} job [bold]{as_text(data.get('id'))}[/bold]: {as_text(data.get('state'))}{said}"
    )


def why(
    job: JobArg,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Explain why a job is pending (or what state it is in)."""
    data = ask(home, url, token, lambda c: c.why(job))
    if json_out:
        print_json(data)
        return
    # the state once: an ended job's reason says it again ("failed: out of memory ...")
    said = after_state(data.get("state"), data.get("reason"))
    console.print(as_text(f"{data.get('id')} {data.get('state')}{said}"), highlight=False)


# -- nodes / top -------------------------------------------------------------------------------


def top(
    once: Annotated[bool, typer.Option("--once", help="Print one frame and exit.")] = False,
    interval: Annotated[
        float,
        float_option(
            "--interval", help="Seconds between refreshes.", example="2", low=0.1, high=3600.0
        ),
    ] = 1.0,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """A live view of nodes, GPUs and jobs, as many as the terminal holds (Ctrl-C to
    quit); with --once, one frame with every GPU. Into a pipe or a file, a frame with every
    GPU each --interval, one after another (as ``top -b``)."""
    with connect(home, url, token) as client:
        try:
            if once:
                problems: list[str] = []
                print_whole(console, top_view.frame(client, width=console.width, problems=problems))
                fail_on(problems)
                return
            while not console.is_terminal:  # Live would show nothing there until Ctrl-C
                frame = read_across_restart(
                    client, lambda: top_view.frame(client, width=console.width)
                )
                print_whole(console, frame)
                console.file.flush()
                time.sleep(interval)

            def live_frame() -> RenderableType:
                # fitted to the terminal (Live shows no more than its height); a control-plane
                # restart is waited out, the last frame on screen
                return read_across_restart(
                    client,
                    lambda: top_view.frame(client, width=console.width, height=console.height),
                )

            with Live(live_frame(), console=console, screen=False) as live:
                while True:
                    time.sleep(interval)
                    live.update(live_frame())
        except DanluError as exc:
            raise fail(exc) from None
        except KeyboardInterrupt:
            return
        except BrokenPipeError:  # `danlu top | head`: its reader has gone
            quiet_stdout()
            raise typer.Exit(code=PIPE_CLOSED) from None


def register(app: typer.Typer) -> None:
    """Add ``submit``, ``wait``, ``ls``, ``show``, ``logs``, ``cancel``, ``rerun``,
    ``update``, ``hold``, ``release``, ``why``, ``usage`` and ``top`` (the node commands are
    :mod:`danlu.cli.nodes`')."""
    reading = (job_views.ls, job_views.show, logs)
    commands = (submit, waiting.wait, *reading, cancel, rerun, update, hold, release, why)
    for command in (*commands, usage_cli.usage, top):
        app.command(name=command.__name__)(command)
