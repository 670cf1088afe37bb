"""Projects over the REST client: ``danlu project ls / add / set``.

Creating and changing projects is for admins (the server answers 403 otherwise). Options,
the client and errors are those of :mod:`danlu.cli.jobs`.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from danlu.cli import jobs as common
from danlu.cli.markup import as_text, note_lines
from danlu.cli.options import (
    HomeOpt,
    JsonOpt,
    TokenOpt,
    UrlOpt,
    float_option,
    int_option,
)
from danlu.cli.output import stdout_written
from danlu.cli.quota_flags import gpu_quota, quota_value
from danlu.cli.reply_fields import PROJECT
from danlu.cli.reply_views import gpu_count, show_data
from danlu.cli.titled_table import TitledTable, titled_table
from danlu.core.errors import SpecError
from danlu.core.units import format_bytes, parse_bytes
from danlu.core.values import visible

ProjectArg = Annotated[str, typer.Argument(help="The project's name.")]
PriorityOpt = Annotated[
    int | None,
    int_option(
        "--priority", help="Higher runs first.", example="10", low=-1_000_000, high=1_000_000
    ),
]
QuotaGpusOpt = Annotated[
    str | None,
    typer.Option("--quota-gpus", help="GPUs the project's jobs may hold at once, or 'none'."),
]
QuotaMemoryOpt = Annotated[
    str | None,
    typer.Option(
        "--quota-memory", help="GPU memory its jobs may hold at once (e.g. 640GiB), or 'none'."
    ),
]
MembersOpt = Annotated[
    str | None,
    typer.Option(
        "--members",
        help="Users who may submit to it, comma-separated (admins always may); 'all': everyone.",
    ),
]
ShareOpt = Annotated[
    float | None,
    float_option(
        "--share",
        help="Its weight in the fair-share policy (default 1): 2 is owed twice what 1 is.",
        example="2",
        low=0.000001,
        high=1_000_000,
    ),
]

project_app = typer.Typer(
    rich_markup_mode="markdown",  # as the main app (danlu.cli.main)
    help="Projects (queues): priorities, quotas and fair-share weights.",
    no_args_is_help=True,
)


def _memory(value: str) -> int:
    return parse_bytes(value, "--quota-memory")


def _gpus_or_dash(value: Any) -> str:
    return "-" if value is None else f"{float(value):.2f}"


def _members(value: str | None) -> list[str] | None:
    """``--members``: None when not given, [] for ``all``, else the names. ``none`` (or
    nothing) is refused: it would read as "nobody", yet an empty list opens the project to
    every user."""
    if value is None:
        return None
    if value.strip().lower() in ("all", "everyone"):
        return []
    names = [name.strip() for name in value.split(",") if name.strip()]
    if not names or value.strip().lower() == "none":
        raise common.fail(
            SpecError(
                "--members",
                f"{value!r} names no user: give the users who may submit, comma-separated "
                "(admins always may), or 'all' to open the project to every user",
            )
        )
    return names


def _share(data: dict[str, Any]) -> str:
    share = data.get("share")
    return f"{1.0 if share is None else float(share):g}"


UNKNOWN_MEMBERS = "?"
"""A project's members shown when its reply holds none: the API always sends them (``[]``:
every user), so one without them (left out as of the wrong type, :mod:`danlu.cli.reply_fields`)
is not known to be open to all."""


def _members_text(data: dict[str, Any]) -> str:
    """Who may submit to the project ``data``: its members' names, ``all`` for none listed,
    :data:`UNKNOWN_MEMBERS` when the reply holds no ``members``."""
    if "members" not in data:
        return UNKNOWN_MEMBERS
    listed = data["members"] or []
    return ", ".join(as_text(name) for name in listed) if listed else "all"


def _project_line(data: dict[str, Any]) -> str:
    gpus = data.get("quota_gpus")
    memory = data.get("quota_gpu_memory")
    quota_gpus = "no GPU quota" if gpus is None else f"at most {gpu_count(gpus)}"
    quota_memory = "no memory quota" if memory is None else f"at most {format_bytes(memory)}"
    return (
        f"project [bold]{as_text(data.get('name'))}[/bold]: priority "
        f"{as_text(data.get('priority'))}, {quota_gpus}, {quota_memory}, share {_share(data)}, "
        f"members: {_members_text(data)}"
    )


@project_app.command("ls")
def project_ls(
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """List the projects with their priorities, quotas and fair-share weights, the GPUs
    they hold and their recent usage (when the policy keeps a history)."""
    data = common.ask(home, url, token, lambda c: c.projects())
    show_data(data, json_out, _projects_table, PROJECT)


def _projects_table(projects: list[dict[str, Any]]) -> TitledTable:
    rows = [
        (
            as_text(row.get("name")),
            as_text(row.get("priority")),
            "-" if row.get("quota_gpus") is None else f"{row['quota_gpus']:g}",
            "-" if row.get("quota_gpu_memory") is None else format_bytes(row["quota_gpu_memory"]),
            _share(row),
            _gpus_or_dash(row.get("gpus_held")),
            _gpus_or_dash(row.get("recent_gpus")),
            _members_text(row),
        )
        for row in projects
    ]
    columns = (
        "project",
        "priority",
        "GPU quota",
        "GPU memory quota",
        "share",
        "GPUs held",
        "recent GPUs",
        "members",
    )
    return titled_table("projects", columns, rows, numbers=columns[1:7])


@project_app.command("add")
def project_add(
    name: ProjectArg,
    priority: PriorityOpt = None,
    quota_gpus: QuotaGpusOpt = None,
    quota_memory: QuotaMemoryOpt = None,
    share: ShareOpt = None,
    members: MembersOpt = None,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Create a project (admin); jobs name it in their spec's `project` (with --members,
    only those users' jobs, and admins')."""
    gpus = quota_value(quota_gpus, "--quota-gpus", gpu_quota)
    memory = quota_value(quota_memory, "--quota-memory", _memory)
    data = common.ask(
        home,
        url,
        token,
        lambda c: c.create_project(
            name,
            priority or 0,
            None if gpus == "none" else gpus,
            None if memory == "none" else memory,
            1.0 if share is None else share,
            _members(members) or [],
        ),
    )
    made = visible(name)
    # an error alone read as a refusal: a script ran it again and was told "already exists"
    with stdout_written(f"project {made} was created all the same (danlu project ls)"):
        show_data(data, json_out, _project_line, PROJECT)
        _print_notes(data, json_out)


@project_app.command("set")
def project_set(
    name: ProjectArg,
    priority: PriorityOpt = None,
    quota_gpus: QuotaGpusOpt = None,
    quota_memory: QuotaMemoryOpt = None,
    share: ShareOpt = None,
    members: MembersOpt = None,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Change a project's priority, quotas, fair-share weight or members (admin); options
    left out stay as they are, a quota given as 'none' is removed, and --members replaces
    the list ('all': open to every user)."""
    fields: dict[str, Any] = {}
    listed = _members(members)
    if listed is not None:
        fields["members"] = listed
    if priority is not None:
        fields["priority"] = priority
    if share is not None:
        fields["share"] = share
    for key, given in (
        ("quota_gpus", quota_value(quota_gpus, "--quota-gpus", gpu_quota)),
        ("quota_gpu_memory", quota_value(quota_memory, "--quota-memory", _memory)),
    ):
        if given is not None:
            fields[key] = None if given == "none" else given
    if not fields:
        raise common.fail(
            "nothing to change: give --priority, --quota-gpus, --quota-memory, --share or --members"
        )
    data = common.ask(home, url, token, lambda c: c.update_project(name, **fields))
    show_data(data, json_out, _project_line, PROJECT)
    _print_notes(data, json_out)


def _print_notes(data: Any, json_out: bool) -> None:
    """The reply's ``notes`` (a project's ``share`` under a policy that does not weigh it)
    as ``note:`` lines after its line, as a submission's; in ``--json`` they are a field."""
    if not json_out and isinstance(data, dict):
        for line in note_lines(data.get("notes") or []):
            common.console.print(line, highlight=False)
