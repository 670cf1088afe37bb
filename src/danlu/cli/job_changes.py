"""``danlu cancel``, ``danlu update``, ``danlu hold`` and ``danlu release``: what changes a
job already submitted. Output goes through :data:`danlu.cli.jobs.console` (tests replace
it), the client through :func:`danlu.cli.jobs.connect`; the flags ``danlu update`` shares
with ``danlu submit`` are :mod:`danlu.cli.override_flags`'."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from danlu.cli import jobs as common
from danlu.cli.job_table import gpus_of
from danlu.cli.markup import as_text, note_lines
from danlu.cli.options import HomeOpt, JobArg, JsonOpt, TokenOpt, UrlOpt, fail, int_option
from danlu.cli.override_flags import (
    GpuMemoryOpt,
    GpusOpt,
    MaxRestartsOpt,
    refusal_by_flag,
)
from danlu.client import Client
from danlu.client.errors import ApiError
from danlu.core.state import JobState
from danlu.core.units import format_duration


def cancel(
    job: JobArg,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Cancel a job (a running job is stopped; a finished one is a conflict)."""
    data = common.ask_job(home, url, token, job, lambda c: c.cancel(job), "cancel")
    if json_out:
        common.print_json(data)
        return
    if data.get("state") in STOPPING:  # answered still RUNNING: CANCELLED once the run exits
        _job_line(data, False, "cancelling", "stopping it (SIGTERM, then SIGKILL after its grace)")
        return
    _job_line(data, False, "cancelled")


UPDATE_FLAGS = {
    "priority": "--priority",
    "time_limit": "--time-limit",
    "deadline": "--deadline",
    "max_restarts": "--max-restarts",
    "resources.gpus": "--gpus",
    "resources.gpu_memory": "--gpu-memory",
}
"""The ``danlu update`` flag that gives each field ``PATCH /jobs/{id}`` changes."""

NewTimeLimitOpt = Annotated[
    str | None,
    typer.Option(
        "--time-limit",
        help="New time limit: 4h, 04:00:00; none (or UNLIMITED) removes it.",
    ),
]
"""``danlu update``'s ``--time-limit``: passed to the server as given (which reads the
duration, or ``none`` that removes the limit: a job spec refuses the word)."""
NewDeadlineOpt = Annotated[
    str | None,
    typer.Option(
        "--deadline",
        help="Finish within this long of its submission: 6h, 2-00:00:00; none removes it.",
    ),
]
"""``danlu update``'s ``--deadline``, passed to the server as given, as ``--time-limit``."""


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
    time_limit: NewTimeLimitOpt = None,
    deadline: NewDeadlineOpt = None,
    gpus: GpusOpt = None,
    gpu_memory: GpuMemoryOpt = None,
    max_restarts: MaxRestartsOpt = None,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Change an unfinished job: its priority (the next round ranks it anew), time limit or
    deadline, also while it runs (none removes one); its GPUs, GPU memory or max restarts
    while it is PENDING (hold a running job first). Validated as a submission; each change
    is an event."""
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
            raise refusal_by_flag(exc, {}, (), flags) from None

    data = common.ask(home, url, token, change)
    if json_out:
        common.print_json(data)
        return
    shown = ", ".join(_changed_text(data, field) for field in given if "gpu" not in field)
    if gpus is not None or gpu_memory is not None:
        shown += (", " if shown else "") + f"gpus {as_text(gpus_of(data))}"
    common.console.print(f"job [bold]{as_text(data.get('id'))}[/bold]: {shown}", highlight=False)
    for note in note_lines(data.get("notes")):
        common.console.print(note, highlight=False)


def _changed_text(job: dict[str, Any], field: str) -> str:
    """A field ``danlu update`` changed, as the reply has it now: ``time_limit 2h``,
    ``time_limit none`` once removed."""
    spec = job.get("spec")
    value = job.get(field) if field in ("priority", "time_limit") else None
    if field in ("deadline", "max_restarts") and isinstance(spec, dict):
        value = spec.get(field)
    duration = field in ("time_limit", "deadline") and not isinstance(value, bool)
    if duration and value is None:
        return f"{field} none"
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
    data = common.ask_job(home, url, token, job, lambda c: c.update_job(job, held=True))
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

    was_held, data = common.ask_job(home, url, token, job, release_job)
    if was_held or json_out:
        _job_line(data, json_out, "released")
        return
    common.console.print(
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
        common.print_json(data)
        return
    said = f", {doing}" if doing else ""
    common.console.print(
        f"{what} job [bold]{as_text(data.get('id'))}[/bold]: {as_text(data.get('state'))}{said}"
    )
