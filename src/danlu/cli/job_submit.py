"""``danlu submit`` and ``danlu rerun``: a job made from a spec file, or again from a finished
job's spec, with the flags that override its fields (:mod:`danlu.cli.override_flags`), then
printed and, with ``--wait``, waited for. Output goes through
:data:`danlu.cli.jobs.console` (tests replace it), the client through
:func:`danlu.cli.jobs.connect`; the building of a spec from its file is
:mod:`danlu.cli.spec_build`'s."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from danlu.cli import jobs as common
from danlu.cli import waiting
from danlu.cli.markup import as_text, note_lines, submitted_notes
from danlu.cli.options import (
    HomeOpt,
    JobArg,
    JsonOpt,
    TokenOpt,
    UrlOpt,
    fail,
    path_of,
)
from danlu.cli.output import stdout_written
from danlu.cli.override_flags import (
    EnvOpt,
    GpuMemoryOpt,
    GpusOpt,
    MaxRestartsOpt,
    NameOpt,
    PriorityOpt,
    ProjectOpt,
    RerunTimeLimitOpt,
    SetsOpt,
    TimeLimitOpt,
    UserOpt,
    env_variables,
    spec_overrides,
)
from danlu.cli.spec_build import JOB_SPEC_FIX, apply_flags, build_spec
from danlu.cli.spec_flags import (
    FlagValueError,
    FlagWrite,
    after_writes,
    flag_error,
    flag_writes,
    named_by_flag,
)
from danlu.client import Client
from danlu.client.errors import ApiError
from danlu.core.errors import DanluError, SpecError
from danlu.core.job_array import ArrayRange, array_sweep, parse_array
from danlu.core.sweep import parse_sweep
from danlu.core.values import visible


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
    max_restarts: MaxRestartsOpt = None,
    env: EnvOpt = None,
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
        max_restarts=max_restarts,
    )
    after_items = list(after or [])
    given = list(sets or [])
    try:
        variables = env_variables(env)
        body = build_spec(spec, overrides, given, after_items, variables)
        # what each flag wrote, to name a refusal of it by: --after's entries are
        # depends_on's last
        after_from = len(body.get("depends_on") or []) - len(after_items)
        writes = flag_writes(overrides, given, variables) + after_writes(after_items, after_from)
        in_spec = body.pop("array", None)
        tasks = _array_tasks(array) if array is not None else None
        if tasks is None and in_spec is not None:
            tasks = parse_array(in_spec)
        sweep = None if tasks is None else array_sweep(body, tasks)
        if sweep is not None:
            try:  # what only an array refuses (env.DANLU_ARRAY_INDEX), named here
                parse_sweep(sweep)
            except SpecError as exc:
                raise named_by_flag(exc, writes) from None
    except DanluError as exc:
        raise fail(exc, None if isinstance(exc, FlagValueError) else spec) from None
    if sweep is not None:  # submitted as its sweep, and waited for as one
        make_array = _flag_named(lambda c: c.submit_sweep(sweep), writes)
        _new_job(make_array, wait_end, json_out, home, url, token, _array_submitted)
        return
    make = _flag_named(lambda client: client.submit(body), writes)
    _new_job(make, wait_end, json_out, home, url, token)


def _array_tasks(array: str) -> ArrayRange:
    """The indices ``--array`` gives; one it cannot read is named by ``--array``, not by
    the spec file."""
    try:
        return parse_array(array, "--array")
    except SpecError as exc:
        raise flag_error("array", "--array", exc.message) from None


def _flag_named(
    make: Callable[[Client], dict[str, Any]], writes: Sequence[FlagWrite]
) -> Callable[[Client], dict[str, Any]]:
    """``make`` (a submission, a rerun), its server's refusal of a field that a flag of
    ``writes`` gave its final value named by that flag
    (:func:`~danlu.cli.spec_flags.named_by_flag`: ``--max-restarts: ...``, ``--env SEED:
    ...``, ``--after 'ID': ...`` for the ``depends_on`` entry it added), not by the field's
    path, which the user may never have written."""

    def send(client: Client) -> dict[str, Any]:
        try:
            return make(client)
        except ApiError as exc:
            raise named_by_flag(exc, writes) from None

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
    with common.connect(home, url, token) as client:
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
            common.err.print(
                f"interrupted: {kind} {ident} goes on (danlu wait {ident}; danlu {cancel} {ident})",
                highlight=False,
                soft_wrap=True,
            )
            raise typer.Exit(code=waiting.INTERRUPTED) from None
        raise typer.Exit(code)


def _array_submitted(sweep: dict[str, Any], json_out: bool) -> None:
    if json_out:
        common.print_json(sweep)
        return
    spec = sweep.get("spec")  # a reply of another server's kind: shown without what it lacks
    parallel = spec.get("parallel") if isinstance(spec, dict) else None
    common.console.print(
        f"submitted array [bold]{as_text(sweep['id'])}[/bold] ({as_text(sweep.get('name'))}): "
        f"{as_text(sweep.get('total'))} tasks, at most {as_text(parallel)} at once; "
        f"danlu sweep show {as_text(sweep['id'])}",
        highlight=False,
    )
    for note in note_lines(sweep.get("notes")):  # what the submission told of every task
        common.console.print(note, highlight=False)


def _submitted(job: dict[str, Any], json_out: bool) -> None:
    if json_out:
        common.print_json(job)
        return
    waits, notes = submitted_notes(job)
    waiting = f", {waits}" if waits else ""
    common.console.print(
        f"submitted job [bold]{as_text(job.get('id'))}[/bold] ({as_text(job.get('name'))}): "
        + as_text(f"{job.get('state')}{waiting}"),
        highlight=False,
    )
    for note in note_lines(notes):  # as an array's: whole GPUs for a memory not estimated
        common.console.print(note, highlight=False)


def rerun(
    job: JobArg,
    name: NameOpt = None,
    priority: PriorityOpt = None,
    project: ProjectOpt = None,
    user: UserOpt = None,
    gpus: GpusOpt = None,
    gpu_memory: GpuMemoryOpt = None,
    time_limit: RerunTimeLimitOpt = None,
    max_restarts: MaxRestartsOpt = None,
    env: EnvOpt = None,
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
    changes: dict[str, Any] = {}
    try:  # --set last, as submit applies it
        writes = apply_flags(changes, overrides, list(sets or []), env_variables(env))
    except DanluError as exc:
        raise fail(exc) from None
    make = _flag_named(lambda client: client.rerun(job, changes), writes)  # by the flag
    _new_job(make, wait_end, json_out, home, url, token)
