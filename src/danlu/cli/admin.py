"""Users and projects over the REST client: ``danlu whoami``, ``danlu user add / token / ls /
tokens / revoke / disable / enable`` and ``danlu project ls / add / set``.

Creating users and projects, and issuing another user's token, is for admins (the server
answers 403 otherwise); a user may issue tokens for itself. Options, the client and errors
are those of :mod:`danlu.cli.jobs`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Annotated, Any

import typer
from rich.cells import cell_len
from rich.console import Group, JustifyMethod, RenderableType
from rich.table import Table
from rich.text import Text

from danlu.cli import jobs as common
from danlu.cli.fitted_table import FittedTable, print_whole
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
from danlu.cli.reply_fields import PROJECT, TOKEN, USER, USER_JOBS, Record
from danlu.core.errors import SpecError
from danlu.core.units import format_bytes, parse_bytes
from danlu.core.values import plain_float, visible

NameArg = Annotated[
    str, typer.Argument(help="The user's name (its OS account's too, with DANLU_RUN_AS=user).")
]
OsUserOpt = Annotated[
    str | None,
    typer.Option(
        "--os-user",
        help="The OS account its jobs run as with DANLU_RUN_AS=user (default: its name).",
    ),
]
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

user_app = typer.Typer(
    rich_markup_mode="markdown",  # as the main app (danlu.cli.main)
    help="Users and their API tokens.",
    no_args_is_help=True,
)
project_app = typer.Typer(
    rich_markup_mode="markdown",  # as the main app (danlu.cli.main)
    help="Projects (queues): priorities, quotas and fair-share weights.",
    no_args_is_help=True,
)

_NONE = ("none", "unlimited", "")


def whoami(
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Who the token is: its user's name and role."""
    data = common.ask(home, url, token, lambda c: c.me())
    show_data(
        data, json_out, lambda d: f"{as_text(d.get('name'))} ({as_text(d.get('role'))})", USER
    )


@user_app.command("add")
def user_add(
    name: NameArg,
    admin: Annotated[bool, typer.Option("--admin", help="An admin, not a plain user.")] = False,
    os_user: OsUserOpt = None,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Create a user (admin); give it a token with `danlu user token NAME`. The names
    default, all and everyone are reserved, in any case (a job's `user: default` means whoever
    submits it, `--members all` every user): the server refuses them."""
    role = "admin" if admin else "user"
    account = _os_account(os_user)
    data = common.ask(home, url, token, lambda c: c.create_user(name, role, account))
    show_data(data, json_out, _user_line, USER)


@user_app.command("set")
def user_set(
    name: NameArg,
    os_user: OsUserOpt = None,
    quota_gpus: Annotated[
        str | None,
        typer.Option(
            "--quota-gpus", help="GPUs the user's jobs may hold at once in all projects, or 'none'."
        ),
    ] = None,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Change a user (admin): the OS account its jobs run as ('none': the one named like
    it), its GPU quota ('none': no limit of its own)."""
    fields: dict[str, Any] = {}
    if os_user is not None:
        fields["os_user"] = _os_account(os_user)
    given = _quota(quota_gpus, "--quota-gpus", _gpus)
    if given is not None:
        fields["quota_gpus"] = None if given == "none" else given
    if not fields:
        raise common.fail("nothing to change: give --os-user ACCOUNT or --quota-gpus N (or none)")
    data = common.ask(home, url, token, lambda c: c.update_user(name, **fields))
    show_data(data, json_out, _user_line, USER)


def _os_account(value: str | None) -> str | None:
    """``--os-user``: the account, or ``None`` for none given or ``none`` (the one named like
    the user). An empty value is refused: a script's unset variable (``--os-user "$ACCOUNT"``)
    moved the user's jobs to the account named like it without a word."""
    if value is None:
        return None
    if not value.strip():
        raise common.fail(
            SpecError(
                "--os-user", "is empty: give an OS account name, or 'none' for the user's name"
            )
        )
    return None if value.lower() in _NONE else value


def gpu_count(gpus: float) -> str:
    """A number of GPUs in words: ``1 GPU``, ``0.5 GPU`` (a part of one), ``2 GPUs``, ``0
    GPUs``."""
    return f"{gpus:g} GPU" + ("" if 0 < gpus <= 1 else "s")


def _user_line(data: dict[str, Any]) -> str:
    account = data.get("os_user")
    runs = f", jobs run as OS account {as_text(account)}" if account else ""
    quota = data.get("quota_gpus")
    limit = f", at most {gpu_count(float(quota))}" if quota is not None else ""
    off = data.get("disabled_at")
    disabled = f", disabled since {when_text(off)}" if off is not None else ""
    return f"user {as_text(data.get('name'))} ({as_text(data.get('role'))}){runs}{limit}{disabled}"


def _user_state(data: dict[str, Any]) -> str:
    """A user's state as ``danlu user ls`` shows it: ``enabled``, or ``disabled`` and since
    when."""
    off = data.get("disabled_at")
    return "enabled" if off is None else f"disabled since {when_text(off)}"


@user_app.command("token")
def user_token(
    name: NameArg,
    label: Annotated[
        str, typer.Option("--label", help="What the token is for (shown in audits).")
    ] = "",
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Issue an API token for a user (admin, or the user itself) and print it, alone on
    stdout: it is shown once. The user passes it as --token or DANLU_TOKEN."""
    issued = common.ask(home, url, token, lambda c: c.create_token(name, label))
    check_issued(issued, name)
    # a token is dl_PREFIX_SECRET: its prefix (public, as `danlu user tokens` lists it)
    parts = issued.split("_")
    prefix = parts[1] if len(parts) >= 3 and parts[0] == "dl" and parts[1] else "PREFIX"
    user = visible(name)
    with stdout_written(
        f"a token for {user} was issued all the same, and not shown: revoke it (danlu user "
        f"revoke {user} {prefix})"
    ):
        common.print_plain(issued)


def check_issued(issued: str, user: str) -> None:
    """Fail (exit 2) when the token the server sent for ``user`` is not printable ASCII
    without spaces (an API token is, or no header carries it): its ESC sequence or line
    break would reach the terminal raw, and it could not be used as ``--token``. The
    error names the character, never the secret."""
    for index, char in enumerate(issued):
        if not "!" <= char <= "~":
            raise common.fail(
                f"the server sent a token for {user} holding U+{ord(char):04X} at character "
                f"{index + 1}, not printable ASCII: not printed, as it cannot be used as "
                f"--token; revoke it (danlu user tokens {user}; danlu user revoke {user} PREFIX)"
            )
    if not issued:
        raise common.fail(f"the server sent an empty token for {user}: nothing to print")


@user_app.command("ls")
def user_ls(
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """List the users, their roles, and whether each is enabled or disabled (admin)."""
    data = common.ask(home, url, token, lambda c: c.users())
    show_data(data, json_out, _users_table, USER)


def _users_table(users: list[dict[str, Any]]) -> TitledTable:
    rows = [
        (
            as_text(row.get("name")),
            as_text(row.get("role")),
            as_text(row.get("os_user") or "-"),
            "-" if row.get("quota_gpus") is None else f"{float(row['quota_gpus']):g}",
            _user_state(row),
        )
        for row in users
    ]
    columns = ("user", "role", "OS account", "GPU quota", "state")
    return titled_table("users", columns, rows, numbers=("GPU quota",))


@user_app.command("tokens")
def user_tokens(
    name: NameArg,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """List a user's live tokens by prefix, without their secrets (admin, or the user)."""
    data = common.ask(home, url, token, lambda c: c.tokens(name))

    def table(tokens: list[dict[str, Any]]) -> TitledTable:
        rows = [
            (
                as_text(row.get("prefix")),
                # a label the user chose before the API refused control characters: shown
                # escaped, never acting on the terminal or splitting the row
                as_text(row.get("name")),
                as_text(row.get("job_id") or ""),
                when_text(row.get("created_at")),
                when_text(row.get("last_used_at")),
            )
            for row in tokens
        ]
        columns = ("prefix", "label", "job", "created", "last used")
        return titled_table(f"live tokens of {as_text(name)}", columns, rows)

    show_data(data, json_out, table, TOKEN)


@user_app.command("revoke")
def user_revoke(
    name: NameArg,
    prefix: Annotated[
        str | None,
        typer.Argument(help="The token's prefix (`danlu user tokens`); all tokens without it."),
    ] = None,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Revoke one token of a user, or all of them, its jobs' too (admin, or the user)."""
    if prefix is not None and not prefix.strip():
        raise common.fail(
            "PREFIX is empty: give a token's prefix (see `danlu user tokens NAME`), "
            "or leave PREFIX out to revoke all of the user's tokens"
        )
    revoked = common.ask(home, url, token, lambda c: c.revoke_tokens(name, prefix))
    common.console.print(f"revoked {revoked} token(s) of {as_text(name)}", highlight=False)


@user_app.command("disable")
def user_disable(
    name: NameArg,
    cancel_jobs: Annotated[
        bool,
        typer.Option(
            "--cancel-jobs",
            help="Also cancel their unfinished jobs, running ones stopped with their grace.",
        ),
    ] = False,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Disable a user (admin), for one who left: their tokens are refused, none is issued
    to them, and their queued jobs are not started until `danlu user enable NAME`; they
    stay listed, as their jobs and usage do. Their running jobs run on unless
    --cancel-jobs cancels every unfinished job of theirs. The last enabled admin cannot be
    disabled."""
    data = common.ask(home, url, token, lambda c: c.disable_user(name, cancel_jobs))
    show_data(data, json_out, _disabled_line, USER_JOBS)


@user_app.command("enable")
def user_enable(
    name: NameArg,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Enable a disabled user again (admin): their tokens (those not revoked) work again
    and their queued jobs are scheduled as before."""
    data = common.ask(home, url, token, lambda c: c.enable_user(name))
    show_data(data, json_out, _enabled_line, USER_JOBS)


def _jobs(count: Any, what: str) -> str:
    """``count`` jobs in words: ``1 queued job``, ``2 running jobs``; ``?`` for a count
    the reply lacks."""
    if not isinstance(count, int):
        return f"? {what} jobs"
    return f"{count} {what} job" + ("" if count == 1 else "s")


def _user_of(data: dict[str, Any]) -> str:
    """The name of the user a disable or enable reply is about."""
    user = data.get("user")
    return as_text(user.get("name") if isinstance(user, dict) else None)


def _disabled_line(data: dict[str, Any]) -> str:
    name = _user_of(data)
    said = [f"user {name} disabled: their tokens are refused"]
    if data.get("cancelled") or data.get("stopping"):
        cancelled, stopping = data.get("cancelled"), data.get("stopping")
        said.append(
            f"{_jobs(cancelled, 'queued')} cancelled, {_jobs(stopping, 'running')} being stopped"
        )
    if data.get("queued"):
        queued = _jobs(data.get("queued"), "queued")
        said.append(f"{queued} not started until enabled again (danlu user enable {name})")
    if data.get("running"):
        running = _jobs(data.get("running"), "running")
        said.append(f"{running} run on (danlu user disable {name} --cancel-jobs stops them)")
    return "; ".join(said)


def _enabled_line(data: dict[str, Any]) -> str:
    said = f"user {_user_of(data)} enabled: their tokens work again"
    if data.get("queued"):
        said += f"; {_jobs(data.get('queued'), 'queued')} may start"
    return said


def show_data(
    data: Any,
    json_out: bool,
    render: Callable[[Any], RenderableType],
    record: Record | None = None,
) -> None:
    """``data`` as JSON with ``--json`` (for scripts), else as ``render`` shows it: with
    ``record``, its kind, without the fields of the wrong type, each of which is then an
    error (exit 2; :mod:`danlu.cli.reply_fields`)."""
    if json_out:
        common.print_json(data)
        return
    problems: list[str] = []
    shown = data if record is None else record.check(data, problems)
    print_whole(common.console, render(shown), highlight=False)  # a pipe: a row a line
    common.fail_on(problems)


def titled_table(
    title: str,
    columns: Sequence[str],
    rows: Iterable[Sequence[str]],
    floors: Mapping[str, int] | None = None,
    numbers: Collection[str] = (),
) -> TitledTable:
    """A table of ``rows`` (Rich markup, as :func:`~danlu.cli.markup.as_text` gives) under
    ``columns``, laid out for the width it is printed at (:class:`TitledTable`; ``floors``:
    the least width of a column, by header, where its header's longest word is too little
    to read it folded, e.g. a URL). ``numbers``: the headers of the columns of numbers
    (counts, quotas, ``3/10``), right-aligned; every other column is text, left-aligned, as
    ``danlu ls``, ``danlu nodes`` and ``danlu sweep ls`` align their columns."""
    return TitledTable(title, columns, rows, floors, numbers)


class TitledTable(FittedTable):
    """A titled table whose first column (the name or id the other commands take) is never
    wrapped or cut, and whose headers never break within a word: on a narrow terminal the
    other columns give way, their text folded onto more lines (a URL, an error), never cut
    with an ellipsis; where even a column as wide as its header's longest word each does not
    fit, one record per line (``name  header: value  ...``)."""

    def __init__(
        self,
        title: str,
        columns: Sequence[str],
        rows: Iterable[Sequence[str]],
        floors: Mapping[str, int] | None = None,
        numbers: Collection[str] = (),
    ) -> None:
        self.title = title
        self.columns = list(columns)
        self.numbers = frozenset(numbers)
        """The headers of the right-aligned columns, of numbers (the others: left)."""
        self.rows = [list(row) for row in rows]
        given = floors or {}
        self.FLOORS = {  # a floor given is no wider than the column's widest cell
            header: max(
                _longest_word(header),
                min([given.get(header, 0), *(_cells(row[i]) for row in self.rows if i < len(row))]),
            )
            for i, header in enumerate(self.columns)
            if i > 0
        }

    def table(self, width: int) -> Table:
        """The table, each column after the first given its header's longest word and then,
        narrowest first, what room ``width`` leaves up to its widest cell."""
        wants = [
            max([_cells(header), *(_cells(row[i]) for row in self.rows if i < len(row))])
            for i, header in enumerate(self.columns)
        ]
        chrome = 3 * len(self.columns) + 1  # a cell's padding and lines
        floors = [self.FLOORS[header] for header in self.columns[1:]]
        widths = fill_widths(floors, wants[1:], width - chrome - wants[0])
        table = Table(title=self.title, title_justify="left")
        for i, column in enumerate(self.columns):
            if i == 0:
                table.add_column(column, justify="left", no_wrap=True, min_width=wants[0])
            else:
                justify: JustifyMethod = "right" if column in self.numbers else "left"
                table.add_column(column, justify=justify, overflow="fold", width=widths[i - 1])
        for row in self.rows:
            table.add_row(*row)
        return table

    def lines(self, width: int) -> RenderableType:
        out: list[RenderableType] = [Text.from_markup(self.title)]
        for row in self.rows:
            line = Text.from_markup(row[0] if row else "", style="bold")
            for header, cell in zip(self.columns[1:], row[1:], strict=False):
                line.append(f"  {Text.from_markup(header).plain}: ")
                line.append_text(Text.from_markup(cell))
            out.append(line)
        return Group(*out)


def _cells(markup: str) -> int:
    """How many terminal cells ``markup`` takes on one line."""
    return Text.from_markup(markup).cell_len


def _longest_word(markup: str) -> int:
    """The cells of the longest word of a header, the least a column may give it."""
    return max((cell_len(word) for word in Text.from_markup(markup).plain.split()), default=1)


def fill_widths(floors: Sequence[int], wants: Sequence[int], room: int) -> list[int]:
    """Widths of columns that each need ``floors[i]`` and want ``wants[i]`` at most, sharing
    ``room``: each its floor, then the rest given one cell at a time to the narrowest column
    still short of what it wants (so that a long URL does not take every cell from a short
    error)."""
    widths = list(floors)
    left = room - sum(widths)
    while left > 0:
        short = [i for i, w in enumerate(widths) if w < wants[i]]
        if not short:
            break
        widths[min(short, key=lambda i: widths[i])] += 1
        left -= 1
    return widths


def when_text(stamp: float | None, layout: str = "%Y-%m-%d %H:%M") -> str:
    """``stamp`` (POSIX seconds) in local time as ``layout`` has it; ``-`` for none."""
    if stamp is None:
        return "-"
    return time.strftime(layout, time.localtime(stamp))


def _quota(value: str | None, option: str, parse: Any) -> Any:
    """``None`` for an option not given; ``"none"`` for one given as ``none`` (no quota);
    else the parsed value (a :class:`SpecError` naming the option becomes exit 2). An empty
    value is refused: it removed the quota, so a script's unset variable (``--quota-gpus
    "$GPUS"``) lifted a project's or user's limit without a word."""
    if value is None:
        return None
    if not value.strip():
        raise common.fail(
            SpecError(
                option,
                "is empty: give a number (e.g. 8 or 640GiB), or 'none' to remove the quota",
            )
        )
    if value.strip().lower() in _NONE:
        return "none"
    try:
        return parse(value.strip())
    except SpecError as exc:  # it names the option itself (parse_bytes): not twice
        raise common.fail(exc if exc.field == option else f"{option}: {exc}") from None
    except ValueError as exc:
        raise common.fail(f"{option}: {exc}") from None


def _gpus(value: str) -> float:
    """``--quota-gpus``: a number of GPUs, 0 or more (a share of one GPU counts its part),
    written plainly (:func:`~danlu.core.values.plain_float`): ``float`` also read ``1_6``
    as 16 and other scripts' digits, so a typo set another quota without a word."""
    try:
        gpus = plain_float(value)
    except ValueError:  # float's own message ("could not convert string...") says no fix
        gpus = math.nan
    if not gpus >= 0 or gpus == math.inf:
        raise ValueError(f"give a number of GPUs >= 0 (e.g. 8 or 0.5) or 'none', not {value!r}")
    return gpus


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
    gpus = _quota(quota_gpus, "--quota-gpus", _gpus)
    memory = _quota(quota_memory, "--quota-memory", _memory)
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
        ("quota_gpus", _quota(quota_gpus, "--quota-gpus", _gpus)),
        ("quota_gpu_memory", _quota(quota_memory, "--quota-memory", _memory)),
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


def register(app: typer.Typer) -> None:
    """Add ``whoami`` and the ``user`` and ``project`` groups."""
    app.command(name="whoami")(whoami)
    app.add_typer(user_app, name="user")
    app.add_typer(project_app, name="project")
