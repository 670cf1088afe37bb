"""The flags that override fields of a job's spec, declared once: ``danlu submit``'s, over
its file, and ``danlu rerun``'s, over the finished job's spec (:func:`spec_overrides`;
``--env``'s variables: :func:`env_variables`); ``danlu update`` takes some of them,
``danlu run`` its ``--env``. A value the server refuses is named by the flag that gave it
(:func:`~danlu.cli.spec_flags.named_by_flag`; ``danlu update``'s: :func:`refusal_by_flag`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any

import typer

from danlu.cli.options import int_option
from danlu.cli.spec_flags import flag_writes, named_by_flag, named_writes
from danlu.client.errors import ApiError
from danlu.config import caller_env
from danlu.core.errors import DanluError

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
RerunTimeLimitOpt = Annotated[
    str | None,
    typer.Option(
        "--time-limit",
        help="New time limit: 3600, 90m, 04:00:00; none (or UNLIMITED) removes the job's.",
    ),
]
"""``danlu rerun``'s ``--time-limit``: passed to the server as given, which reads the
duration, or ``none`` that removes the finished job's limit (a spec file refuses the word:
``danlu submit``'s is :data:`TimeLimitOpt`)."""
MaxRestartsOpt = Annotated[
    int | None,
    int_option("--max-restarts", help="Restarts after a failure.", example="3", low=0),
]
EnvOpt = Annotated[
    list[str] | None,
    typer.Option("--env", help="NAME=VALUE, or NAME for its value here (repeatable)."),
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
    :func:`~danlu.cli.spec_flags.named_by_flag` names a refused one's flag."""
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


def env_variables(items: list[str] | None) -> dict[str, str]:
    """The variables ``--env`` gives, by name: ``NAME=VALUE``, or ``NAME`` for its value in
    the caller's environment (:func:`~danlu.cli.run.environment`, as ``danlu run`` reads
    them); a bad item is a :class:`~danlu.cli.spec_flags.FlagValueError` naming it."""
    # run imports danlu.cli.jobs, which imports this module (through the commands)
    from danlu.cli.run import environment

    return environment(list(items or []), caller_env())


def refusal_by_flag(
    exc: ApiError, overrides: dict[str, Any], sets: Sequence[str], flags: Mapping[str, str]
) -> DanluError:
    """The server's refusal ``exc`` of a field a flag gave, named by that flag
    (:func:`~danlu.cli.spec_flags.named_by_flag`, over the writes of ``flags``: dotted field
    to flag, then of ``overrides`` and ``sets``); ``exc`` itself for any other field.
    ``danlu submit`` and ``rerun`` name theirs by the writes that built what they sent."""
    return named_by_flag(exc, named_writes(flags) + flag_writes(overrides, sets))
