"""Webhooks over the REST client (admin): ``danlu webhook add / ls / rm / ping / deliveries``.

A webhook is an HTTP endpoint the control plane posts a signed JSON message to whenever a job
enters one of the states it names (``docs/api.md``, "Webhooks"). Options, the client and
errors are those of :mod:`danlu.cli.jobs`.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from danlu.cli import jobs as common
from danlu.cli.markup import as_text
from danlu.cli.options import (
    HomeOpt,
    JsonOpt,
    TokenOpt,
    UrlOpt,
    int_option,
    job_states,
    refuse_empty,
)
from danlu.cli.output import stdout_written
from danlu.cli.reply_fields import DELIVERY, WEBHOOK
from danlu.cli.reply_views import show_data, when_text
from danlu.cli.titled_table import TitledTable, titled_table
from danlu.core.errors import SpecError
from danlu.core.values import visible

webhook_app = typer.Typer(
    rich_markup_mode="markdown",  # as the main app (danlu.cli.main)
    help="Webhooks: HTTP endpoints told of job state changes (admin).",
    no_args_is_help=True,
)
WebhookArg = Annotated[str, typer.Argument(help="The webhook's id (or a unique prefix).")]


@webhook_app.command("add")
def webhook_add(
    endpoint: Annotated[str, typer.Argument(help="The http(s) URL to post to.")],
    states: Annotated[
        list[str] | None,
        typer.Option(
            "--state",
            help="A job state to be told of (repeatable or a,b; default the ends).",
        ),
    ] = None,
    project: Annotated[
        str | None, typer.Option("--project", help="Only this project's jobs.")
    ] = None,
    user: Annotated[str | None, typer.Option("--user", help="Only this user's jobs.")] = None,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Add a webhook; prints its secret, the key of the messages' signature, this once."""
    try:
        # an unset variable (--project "$P") was sent on: "project '' not found; add it first"
        for flag, value in (("--project", project), ("--user", user)):
            fix = f"give a {flag[2:]}, or leave {flag} out to be told of every {flag[2:]}'s jobs"
            refuse_empty(flag, value, fix)
        wanted = job_states(list(states or []))
    except SpecError as exc:
        raise common.fail(exc) from None
    hook = common.ask(
        home,
        url,
        token,
        lambda c: c.create_webhook(endpoint, states=wanted, project=project, user=user),
    )
    made = visible(str(hook.get("id")))
    with stdout_written(
        f"webhook {made} was added all the same, its secret not shown: remove it (danlu "
        f"webhook rm {made}) and add it again"
    ):
        show_data(
            hook,
            json_out,
            lambda h: (
                f"webhook {as_text(h.get('id'))} -> {as_text(h.get('url'))} on "
                f"{as_text(', '.join(h.get('states') or []))}\n"
                "secret (shown once; X-Danlu-Signature is sha256=HMAC of the body): "
                f"{as_text(h.get('secret'))}"
            ),
            WEBHOOK,
        )


@webhook_app.command("ls")
def webhook_ls(
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Every webhook and its deliveries: pending, delivered, given up."""
    rows = common.ask(home, url, token, lambda c: c.webhooks())
    show_data(rows, json_out, _webhooks_table, WEBHOOK)


def _webhooks_table(hooks: list[dict[str, Any]]) -> TitledTable:
    return titled_table(
        "webhooks",
        ("ID", "URL", "STATES", "FOR", "PENDING", "DELIVERED", "FAILED", "LAST ERROR"),
        (
            (
                as_text(h.get("id")),
                as_text(h.get("url")),
                as_text(",".join(h.get("states") or [])),
                as_text(_scope(h)),
                str(h.get("pending")),
                str(h.get("delivered")),
                str(h.get("failed")),
                as_text(h.get("last_error") or "-"),
            )
            for h in hooks
        ),
        WEBHOOK_FLOORS,
        numbers=("PENDING", "DELIVERED", "FAILED"),
    )


WEBHOOK_FLOORS = {"URL": 24, "STATES": 9, "FOR": 12, "LAST ERROR": 16}
"""The least width of ``danlu webhook ls``' folded columns (a URL, the states, the scope,
an error) in a table; narrower (80 columns), one webhook per line: a URL five characters
wide took a line for each five, ``SUCCEEDED`` broke mid-word."""


@webhook_app.command("rm")
def webhook_rm(
    webhook: WebhookArg,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Remove a webhook and its deliveries, sent or not."""
    common.ask(home, url, token, lambda c: c.remove_webhook(webhook))
    common.console.print(f"removed webhook {as_text(webhook)}", highlight=False)


@webhook_app.command("ping")
def webhook_ping(
    webhook: WebhookArg,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Queue a ping message to the endpoint (see it arrive with ``deliveries``)."""
    delivery = common.ask(home, url, token, lambda c: c.ping_webhook(webhook))
    show_data(
        delivery,
        json_out,
        lambda d: f"queued ping {as_text(d.get('id'))} to webhook {as_text(webhook)}",
        DELIVERY,
    )


@webhook_app.command("deliveries")
def webhook_deliveries(
    webhook: WebhookArg,
    limit: Annotated[
        int,
        int_option("--limit", help="The newest N deliveries.", example="20", low=1, high=1000),
    ] = 20,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """A webhook's latest messages and how their delivery went, newest first."""
    rows = common.ask(home, url, token, lambda c: c.webhook_deliveries(webhook, limit))

    def table(deliveries: list[dict[str, Any]]) -> TitledTable:
        return titled_table(
            f"deliveries of webhook {as_text(webhook)}",
            ("ID", "CREATED", "WHAT", "ATTEMPTS", "OUTCOME"),
            (
                (
                    str(d.get("id")),
                    when_text(d.get("created_at"), "%Y-%m-%d %H:%M:%S"),
                    as_text(what),
                    str(d.get("attempts")),
                    as_text(outcome),
                )
                for d in deliveries
                for what, outcome in (describe(d),)
            ),
            numbers=("ATTEMPTS",),
        )

    show_data(rows, json_out, table, DELIVERY)


def _scope(hook: dict[str, Any]) -> str:
    parts = [f"project {hook['project']}" if hook.get("project") else ""]
    parts.append(f"user {hook['user']}" if hook.get("user") else "")
    return ", ".join(p for p in parts if p) or "all jobs"


def describe(delivery: dict[str, Any]) -> tuple[str, str]:
    """What a Delivery carries and how it went, as ``deliveries`` prints them."""
    what = str(delivery.get("kind"))
    if what == "job.state":
        event = delivery.get("event") or {}
        what = f"job {event.get('job_id')} -> {event.get('new')}"
    error = delivery.get("last_error") or ""
    if delivery.get("delivered"):
        outcome = f"delivered (HTTP {delivery.get('status_code')})"
    elif delivery.get("done_at") is not None:
        outcome = f"given up: {error}"
    elif delivery.get("attempts") == 0:
        outcome = "queued"
    else:
        outcome = f"retrying at {when_text(delivery.get('next_attempt_at'), '%H:%M:%S')}: {error}"
    return what, outcome


def register(app: typer.Typer) -> None:
    """Add the ``webhook`` group."""
    app.add_typer(webhook_app, name="webhook")
