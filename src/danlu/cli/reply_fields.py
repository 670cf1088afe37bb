"""The records the server sends (jobs, nodes, events, users, projects, usage) as the CLI
renders them: each field the renderers read of the type ``docs/api.md`` gives it, or left
out and reported.

A server of another version, or one in a bad state, may send ``"gpus": "2"``,
``"priority": "high"`` or a list where an object belongs; the tables would fail on it with a
raw ``TypeError``. :func:`checked` copies a record without such fields (the tables show
the rest as for a field that is missing or null) and adds a line to ``problems`` for each:
``server sent 'high' for field priority of job 0a1b, expected a whole number``; the command
prints what it can, then those lines, and exits nonzero.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from danlu.client.errors import ServerError
from danlu.core.state import JobState

LAST_TIME = 253_402_300_800.0
"""The first POSIX second past the year 9999: a time a calendar (``time.localtime``,
``strftime``) can show is from 0 to before it."""


@dataclass(frozen=True)
class Field:
    """What a record's field must be (when it is there and not null)."""

    expected: str
    """What it must be, in words: ``a whole number``."""
    accepts: Callable[[Any], bool]
    inner: Mapping[str, Field] | None = None
    """For an object, its own fields; for a list of objects, each one's."""


def _is_number(value: Any) -> bool:
    """A JSON number a float holds: finite, and no integer past a float's range (Python
    reads one of 400 digits, which then fails every float operation)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_time(value: Any) -> bool:
    return _is_number(value) and 0 <= value < LAST_TIME


def _is_objects(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, dict) for item in value)


def _is_scalars(value: Any) -> bool:
    return isinstance(value, list) and not any(isinstance(item, list | dict) for item in value)


TEXT = Field("text", lambda value: isinstance(value, str))
WHOLE = Field("a whole number", _is_whole)
NUMBER = Field("a number", _is_number)
TIME = Field("POSIX seconds", _is_time)
FLAG = Field("true or false", lambda value: isinstance(value, bool))
SCALARS = Field("a list of ids", _is_scalars)


def objects(inner: Mapping[str, Field]) -> Field:
    """A list of objects, each with the fields ``inner``."""
    return Field("a list of objects", _is_objects, inner)


def record(inner: Mapping[str, Field]) -> Field:
    """An object with the fields ``inner``."""
    return Field("an object", lambda value: isinstance(value, dict), inner)


JOB_FIELDS: Mapping[str, Field] = {
    "id": TEXT,
    "name": TEXT,
    "project": TEXT,
    "user": TEXT,
    "state": TEXT,
    "pending_reason": TEXT,
    "end_reason": TEXT,
    "priority": WHOLE,
    "restarts": WHOLE,
    "preemptions": WHOLE,
    "exit_code": WHOLE,
    "batch_size": WHOLE,
    "checkpoint_step": WHOLE,
    "gpus": WHOLE,
    "gpu_memory": NUMBER,
    "time_limit": NUMBER,
    "run_time": NUMBER,
    "energy_joules": NUMBER,
    "launched": FLAG,
    **{
        key: TIME
        for key in (
            "submitted_at",
            "started_at",
            "finished_at",
            "deadline_at",
            "held_at",
            "purged_at",
        )
    },
    "allocation": objects({"node": TEXT, "gpu": WHOLE, "milli": NUMBER, "memory": NUMBER}),
    "spec": record({"command": SCALARS, "resources": record({"gpu_fraction": NUMBER})}),
}
"""A Job's fields that ``danlu show``, ``ls`` and ``top`` render (``docs/api.md``)."""

GPU_FIELDS: Mapping[str, Field] = {
    "index": WHOLE,
    "type": TEXT,
    "memory": NUMBER,
    "allocated_memory": NUMBER,
    "allocated_milli": NUMBER,
    "jobs": SCALARS,
    "other_jobs": WHOLE,
    "state": TEXT,
    "cordon_reason": TEXT,
}
NODE_FIELDS: Mapping[str, Field] = {
    "name": TEXT,
    "gpu_type": TEXT,
    "fake": FLAG,
    "state": TEXT,
    "cordon_reason": TEXT,
    "close_at": TIME,
    "close_action": TEXT,
    "close_reason": TEXT,
    "close_until": TIME,
    "open_at": TIME,
    "gpus": objects(GPU_FIELDS),
}
"""A Node's fields that ``danlu nodes`` and ``top`` render (``docs/api.md``)."""

EVENT_FIELDS: Mapping[str, Field] = {
    "id": WHOLE,
    "job_id": TEXT,
    "job_name": TEXT,
    "user": TEXT,
    "project": TEXT,
    "time": TIME,
    "old": TEXT,
    "new": TEXT,
    "reason": TEXT,
}
"""An event's fields that ``danlu show`` and ``events`` render (the feed's also carry
``job_name``, ``user`` and ``project``)."""

USER_FIELDS: Mapping[str, Field] = {
    "name": TEXT,
    "role": TEXT,
    "os_user": TEXT,
    "quota_gpus": NUMBER,
    "disabled_at": TIME,
    "disabled_by": TEXT,
    "disable_reason": TEXT,
}
"""A user's fields that ``danlu whoami``, ``user ls / add / set`` render."""

USER_JOBS_FIELDS: Mapping[str, Field] = {
    "user": record(USER_FIELDS),
    **{key: WHOLE for key in ("queued", "running", "cancelled", "stopping")},
}
"""The fields of a user's disable or enable that ``danlu user disable / enable`` render."""

USER_EVENT_FIELDS: Mapping[str, Field] = {
    "id": WHOLE,
    "time": TIME,
    "kind": TEXT,
    "actor": TEXT,
    "detail": TEXT,
}
"""A user event's fields that ``danlu user show`` renders."""

TOKEN_FIELDS: Mapping[str, Field] = {
    "prefix": TEXT,
    "name": TEXT,
    "job_id": TEXT,
    "created_at": TIME,
    "last_used_at": TIME,
}
"""A token's fields that ``danlu user tokens`` renders."""

PROJECT_FIELDS: Mapping[str, Field] = {
    "name": TEXT,
    "priority": WHOLE,
    "quota_gpus": NUMBER,
    "quota_gpu_memory": NUMBER,
    "share": NUMBER,
    "gpus_held": NUMBER,
    "recent_gpus": NUMBER,
    "members": SCALARS,
}
"""A project's fields that ``danlu project ls / add / set`` render."""

USAGE_FIELDS: Mapping[str, Field] = {
    "project": TEXT,
    "user": TEXT,
    "gpu_hours": NUMBER,
    "gpu_memory_gib_hours": NUMBER,
    "jobs": WHOLE,
    "energy_kwh": NUMBER,
}
"""A row's fields of ``GET /usage`` that ``danlu usage`` renders."""

TRIAL_FIELDS: Mapping[str, Field] = {
    "trial": WHOLE,
    "job_id": TEXT,
    "state": TEXT,
    "best": NUMBER,
    "step": WHOLE,
    "parameters": record({}),
}
TEXTS = Field(
    "a list of text",
    lambda value: isinstance(value, list) and all(isinstance(item, str) for item in value),
)
SWEEP_FIELDS: Mapping[str, Field] = {
    "id": TEXT,
    "name": TEXT,
    "user": TEXT,
    "state": TEXT,
    "reason": TEXT,
    "submitted": WHOLE,
    "total": WHOLE,
    "metric": TEXT,
    "goal": TEXT,
    "best": record({"trial": WHOLE, "job_id": TEXT}),
    "trials": objects(TRIAL_FIELDS),
    "notes": TEXTS,
}
"""A sweep's (or job array's) fields that ``danlu sweep ls / show / cancel`` render."""
WEBHOOK_FIELDS: Mapping[str, Field] = {
    "id": TEXT,
    "url": TEXT,
    "states": TEXTS,
    "project": TEXT,
    "user": TEXT,
    "pending": WHOLE,
    "delivered": WHOLE,
    "failed": WHOLE,
    "last_error": TEXT,
    "secret": TEXT,
}
"""A webhook's fields that ``danlu webhook add / ls`` render."""

DELIVERY_FIELDS: Mapping[str, Field] = {
    "id": WHOLE,
    "kind": TEXT,
    "event": record({"job_id": TEXT, "new": TEXT}),
    "created_at": TIME,
    "attempts": WHOLE,
    "next_attempt_at": TIME,
    "done_at": TIME,
    "delivered": FLAG,
    "status_code": WHOLE,
    "last_error": TEXT,
}
"""A delivery's fields that ``danlu webhook ping / deliveries`` render."""

JOB_STATE = Field(
    "a job state (" + ", ".join(JobState) + ")",
    lambda value: isinstance(value, str) and value in set(JobState),
)
"""A job's ``state`` a command acts on (``danlu metrics -f`` stops once it has ended)."""


def _is_stored_time(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


METRIC_FIELDS: Mapping[str, Field] = {
    "step": WHOLE,
    "time": Field("POSIX seconds", _is_stored_time),
    "attempt": WHOLE,
    "rollback": WHOLE,
    "superseded": FLAG,
}
"""A metric record's own fields that ``danlu metrics`` renders; its ``time`` any number (one
in nanoseconds stored before the API refused them is shown as ``-``, not an error)."""
METRIC_VALUE = Field("a number", lambda value: not isinstance(value, list | dict))
"""A metric's value: a number (text, true or false are shown as they are; a list or an
object is no metric)."""


def checked_metrics(records: list[dict[str, Any]], problems: list[str]) -> list[dict[str, Any]]:
    """Each of ``records`` (``GET /jobs/{id}/metrics``) as :func:`checked` leaves it: its
    :data:`METRIC_FIELDS` and each metric (:data:`METRIC_VALUE`), named by its step."""
    return [
        checked(
            row,
            {key: METRIC_FIELDS.get(key, METRIC_VALUE) for key in row},
            _named("metric record at step", row, "step"),
            problems,
        )
        for row in records
    ]


SHOWN_VALUE = 60
"""The most characters of a wrong value a problem quotes."""


def _quoted(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN_VALUE else text[: SHOWN_VALUE - 3] + "..."


def wrong_field(value: Any, name: str, what: str, field: Field) -> str:
    """The problem of field ``name`` of ``what`` sent as ``value``, not what ``field`` says:
    ``server sent 'x' for field id of an event, expected a whole number``."""
    return f"server sent {_quoted(value)} for field {name} of {what}, expected {field.expected}"


def needed(found: Mapping[str, Any], key: str, field: Field, what: str, why: str) -> Any:
    """``found[key]``, a field a command cannot go on without (the id a follower reads on
    from, the state that says a job ended): when it is missing, null or not what ``field``
    says, a :class:`~danlu.client.errors.ServerError` naming it (``what``: the record) and
    what cannot be done (``why``), which a command prints as an error (exit 2)."""
    value = found.get(key)
    if value is None or not field.accepts(value):
        raise ServerError(200, "http", None, f"{wrong_field(value, key, what, field)}: {why}")
    return value


def checked(
    found: Mapping[str, Any],
    fields: Mapping[str, Field],
    what: str,
    problems: list[str],
    prefix: str = "",
) -> dict[str, Any]:
    """A copy of ``found`` (a record ``what`` names: ``job 0a1b``) without the ``fields``
    that are not what they must be (null is always accepted), nested objects checked
    likewise; each one left out is a line of ``problems`` naming the field (``prefix``
    before its name: ``allocation[0].``)."""
    kept = dict(found)
    for key, field in fields.items():
        value = kept.get(key)
        if value is None:
            continue
        name = prefix + key
        if not field.accepts(value):
            problems.append(
                f"{wrong_field(value, name, what, field)}; it is left out (is the server "
                "another danlu version?)"
            )
            del kept[key]
        elif field.inner is not None and isinstance(value, list):
            inner = field.inner
            kept[key] = [
                checked(item, inner, what, problems, f"{name}[{index}].")
                for index, item in enumerate(value)
            ]
        elif field.inner is not None:
            kept[key] = checked(value, field.inner, what, problems, f"{name}.")
    return kept


def _named(kind: str, found: Mapping[str, Any], key: str) -> str:
    ident = found.get(key)
    return f"{kind} {ident}" if isinstance(ident, str | int) else kind


def checked_records(
    found: list[dict[str, Any]],
    fields: Mapping[str, Field],
    kind: str,
    key: str,
    problems: list[str],
) -> list[dict[str, Any]]:
    """Each of ``found`` as :func:`checked` leaves it, named as ``kind`` and its ``key``'s
    value (``node node-0``)."""
    return [checked(row, fields, _named(kind, row, key), problems) for row in found]


@dataclass(frozen=True)
class Record:
    """A kind of record the server sends: its fields, what one is called (``user``) and the
    field that names it (``name``)."""

    fields: Mapping[str, Field]
    kind: str
    key: str

    def check(self, found: Any, problems: list[str]) -> Any:
        """``found``, one record or a list of them, as :func:`checked` leaves each."""
        if isinstance(found, list):
            return [self.check(row, problems) for row in found]
        if isinstance(found, dict):
            return checked(found, self.fields, _named(self.kind, found, self.key), problems)
        return found


USER = Record(USER_FIELDS, "user", "name")
USER_JOBS = Record(USER_JOBS_FIELDS, "the reply", "")
USER_EVENT = Record(USER_EVENT_FIELDS, "user event", "id")
TOKEN = Record(TOKEN_FIELDS, "token", "prefix")
PROJECT = Record(PROJECT_FIELDS, "project", "name")
USAGE = Record(USAGE_FIELDS, "usage row of project", "project")
SWEEP = Record(SWEEP_FIELDS, "sweep", "id")
WEBHOOK = Record(WEBHOOK_FIELDS, "webhook", "id")
DELIVERY = Record(DELIVERY_FIELDS, "delivery", "id")


def checked_job(job: Mapping[str, Any], problems: list[str]) -> dict[str, Any]:
    """``job`` as :func:`checked` leaves it (:data:`JOB_FIELDS`)."""
    return checked(job, JOB_FIELDS, _named("job", job, "id"), problems)


def checked_jobs(jobs: list[dict[str, Any]], problems: list[str]) -> list[dict[str, Any]]:
    """Each of ``jobs`` as :func:`checked_job` leaves it."""
    return checked_records(jobs, JOB_FIELDS, "job", "id", problems)


def checked_nodes(nodes: list[dict[str, Any]], problems: list[str]) -> list[dict[str, Any]]:
    """Each of ``nodes`` as :func:`checked` leaves it (:data:`NODE_FIELDS`)."""
    return checked_records(nodes, NODE_FIELDS, "node", "name", problems)


def checked_events(events: list[dict[str, Any]], problems: list[str]) -> list[dict[str, Any]]:
    """Each of ``events`` as :func:`checked` leaves it (:data:`EVENT_FIELDS`)."""
    return checked_records(events, EVENT_FIELDS, "event", "id", problems)
