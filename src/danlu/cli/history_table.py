"""A history's last events as a table, oldest first: ``danlu user show`` (a user's,
``GET /users/{name}/events``) and ``danlu node show`` (a node's,
``GET /cluster/nodes/{name}/events``) print them alike: when, what, by whom ('-': the
control plane itself), and the detail."""

from __future__ import annotations

from typing import Any

from danlu.cli.markup import as_text
from danlu.cli.reply_views import when_text
from danlu.cli.titled_table import TitledTable, titled_table

KEPT_EVENTS = 100
"""How many of the latest events a ``show --json`` holds."""
SHOWN_EVENTS = 20
"""How many of them its table prints."""


def events_table(events: list[dict[str, Any]], kept: int) -> list[TitledTable]:
    """The table of ``events``, the last of the ``kept`` read, oldest first (its title
    says when they are not all of them); none when there are none."""
    if not events:
        return []
    rows = [
        (
            when_text(e.get("time"), "%Y-%m-%d %H:%M:%S"),
            as_text(e.get("kind")),
            as_text(e.get("actor") or "-"),
            as_text(e.get("detail") or ""),
        )
        for e in events
    ]
    title = "events" if kept <= len(events) else f"the last {len(events)} events"
    return [titled_table(title, ("time", "event", "by", "detail"), rows)]
