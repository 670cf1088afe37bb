"""Users over the REST client: ``danlu whoami`` and ``danlu user add / set / token / ls /
show / tokens / revoke / disable / enable``; :func:`register` adds them and the ``project`` group
(:mod:`danlu.cli.project`).

Creating users and issuing another user's token is for admins (the server answers 403
otherwise); a user may issue tokens for itself. Options, the client and errors are those of
:mod:`danlu.cli.jobs`.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Group
from rich.table import Table

from danlu.cli import jobs as common
from danlu.cli.fitted_table import print_whole
from danlu.cli.history_table import KEPT_EVENTS, SHOWN_EVENTS, events_table
from danlu.cli.markup import as_text
from danlu.cli.options import HomeOpt, JsonOpt, TokenOpt, UrlOpt
from danlu.cli.output import stdout_written
from danlu.cli.project import project_app
from danlu.cli.quota_flags import NONE_VALUES, gpu_quota, quota_value
from danlu.cli.reply_fields import TOKEN, USER, USER_EVENT, USER_JOBS
from danlu.cli.reply_views import gpu_count, show_data, when_text
from danlu.cli.titled_table import TitledTable, titled_table
from danlu.core.errors import DanluError, SpecError
from danlu.core.values import visible

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

user_app = typer.Typer(
    rich_markup_mode="markdown",  # as the main app (danlu.cli.main)
    help="Users and their API tokens.",
    no_args_is_help=True,
)


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
    default, all, everyone and me are reserved, in any case (a job's `user: default` means
    whoever submits it, `--members all` every user, `/users/me` the caller): the server
    refuses them."""
    role = "admin" if admin else "user"
    account = _os_account(os_user)
    data = common.ask(home, url, token, lambda c: c.create_user(name, role, account))
    made = visible(name)
    # an error alone read as a refusal: a script ran it again and was told "already exists"
    with stdout_written(f"user {made} was created all the same (danlu user show {made})"):
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
    role: Annotated[
        str | None,
        typer.Option(
            "--role",
            help="admin (another admin) or user (a plain user: the last enabled admin cannot "
            "be made one).",
        ),
    ] = None,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Change a user (admin): its role (admin or user), the OS account its jobs run as
    ('none': the one named like it), its GPU quota ('none': no limit of its own). Each
    change is kept in the user's events (danlu user show NAME)."""
    fields: dict[str, Any] = {}
    if role is not None:
        fields["role"] = _role(role)
    if os_user is not None:
        fields["os_user"] = _os_account(os_user)
    given = quota_value(quota_gpus, "--quota-gpus", gpu_quota)
    if given is not None:
        fields["quota_gpus"] = None if given == "none" else given
    if not fields:
        raise common.fail(
            "nothing to change: give --role admin|user, --os-user ACCOUNT or --quota-gpus N "
            "(or none)"
        )
    data = common.ask(home, url, token, lambda c: c.update_user(name, **fields))
    show_data(data, json_out, _user_line, USER)


ROLES = ("admin", "user")
"""The roles ``--role`` takes (the server's)."""


def _role(value: str) -> str:
    """``--role``: ``admin`` or ``user``, in any case, blanks around it ignored; anything
    else fails naming the flag and the choices before anything is sent."""
    role = value.strip().lower()
    if role not in ROLES:
        raise common.fail(
            SpecError("--role", f"{value!r} is not a role: give {' or '.join(ROLES)}")
        )
    return role


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
    return None if value.lower() in NONE_VALUES else value


def _user_line(data: dict[str, Any]) -> str:
    account = data.get("os_user")
    runs = f", jobs run as OS account {as_text(account)}" if account else ""
    quota = data.get("quota_gpus")
    limit = f", at most {gpu_count(float(quota))}" if quota is not None else ""
    off = data.get("disabled_at")
    disabled = f", {_user_state(data)}" if off is not None else ""
    return f"user {as_text(data.get('name'))} ({as_text(data.get('role'))}){runs}{limit}{disabled}"


def _user_state(data: dict[str, Any]) -> str:
    """A user's state as ``danlu user ls`` shows it: ``enabled``, or ``disabled``, since
    when, by whom and why, where the server recorded them (``disabled since 2026-12-08
    10:00 by bob: left the team``)."""
    off = data.get("disabled_at")
    if off is None:
        return "enabled"
    by, reason = data.get("disabled_by"), data.get("disable_reason")
    said = f"disabled since {when_text(off)}"
    said += f" by {as_text(by)}" if by else ""
    # a reason is refused with a control character; one stored otherwise is shown escaped
    return said + (f": {as_text(reason)}" if reason else "")


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


@user_app.command("show")
def user_show(
    name: NameArg,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Show one user (admin, or the user): role, OS account, GPU quota, whether enabled,
    and what happened to the account lately, each by whom ('-': the control plane
    itself): created, changed, disabled, enabled, tokens issued and revoked (by prefix,
    never a secret). --json: the user's record with its last 100 events."""
    with common.connect(home, url, token) as client:
        try:
            data = client.user(name)
            named = data.get("name")  # the events of the user the record is of
            owner = named if isinstance(named, str) and named else name
            events = client.user_events(owner, limit=KEPT_EVENTS, tail=True)
        except DanluError as exc:
            raise common.fail(exc) from None
    if json_out:
        common.print_json(data | {"events": events})
        return
    problems: list[str] = []
    user = USER.check(data, problems)
    shown = [USER_EVENT.check(e, problems) for e in events[-SHOWN_EVENTS:]]
    print_whole(common.console, Group(_user_record(user), *events_table(shown, len(events))))
    common.fail_on(problems)


def _user_record(data: dict[str, Any]) -> Table:
    """``danlu user show``'s lines of the user's record."""
    table = Table(show_header=False, box=None, padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    account = data.get("os_user")
    quota = data.get("quota_gpus")
    for key, value in (
        ("user", as_text(data.get("name"))),
        ("role", as_text(data.get("role"))),
        ("OS account", as_text(account) if account else "- (named like the user)"),
        ("GPU quota", "none" if quota is None else gpu_count(float(quota))),
        ("state", _user_state(data)),
    ):
        table.add_row(key, value)
    return table


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
    reason: Annotated[
        str | None,
        typer.Option(
            "--reason",
            help="Why, on one line of at most 200 characters: shown with the user (user ls), "
            "in the error their tokens get and in their queued jobs' reason.",
        ),
    ] = None,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Disable a user (admin), for one who left: their tokens are refused, none is issued
    to them, and their queued jobs are not started until `danlu user enable NAME`; they
    stay listed, as their jobs and usage do. Their running jobs run on unless
    --cancel-jobs cancels every unfinished job of theirs. The last enabled admin cannot be
    disabled. The server records who disabled them and --reason; disabling a disabled user
    with --reason replaces the reason."""
    data = common.ask(home, url, token, lambda c: c.disable_user(name, cancel_jobs, reason=reason))
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
    user = data.get("user")
    reason = user.get("disable_reason") if isinstance(user, dict) else None
    why = f" ({as_text(reason)})" if reason else ""
    said = [f"user {name} disabled{why}: their tokens are refused"]
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


def register(app: typer.Typer) -> None:
    """Add ``whoami`` and the ``user`` and ``project`` groups."""
    app.command(name="whoami")(whoami)
    app.add_typer(user_app, name="user")
    app.add_typer(project_app, name="project")
