"""The admin tables (``danlu project ls``, ``danlu user ls``, ``danlu user tokens``,
``danlu webhook ls``) fit the terminal without breaking a header within a word: at 80
columns ``project ls`` showed ``priorit`` over ``y`` and ``webhook ls`` ``DELIVER`` over
``ED``. Where the columns cannot each be as wide as their header's longest word, each record
is one line (folded when long), as ``danlu ls`` does (:class:`danlu.cli.top.FittedTable`)."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console, RenderableType
from rich.text import Text

from danlu.cli import admin as admin_cli
from danlu.cli import project as project_cli
from danlu.cli import webhook as webhook_cli
from danlu.cli.titled_table import fill_widths, titled_table

GIB = 2**30

PROJECT = {
    "name": "vision",
    "priority": 10,
    "quota_gpus": 8,
    "quota_gpu_memory": 80 * GIB,
    "weight": 1.0,
    "gpus_held": 2,
    "recent_gpus": 1.5,
    "members": ["alice", "bob"],
}
WEBHOOK = {
    "id": "whk_0123",
    "url": "https://hooks.example.com/services/T0000/B0000/XXXXXXXXXXXX",
    "states": ["FAILED", "SUCCEEDED"],
    "pending": 0,
    "delivered": 12,
    "failed": 1,
    "last_error": "HTTP 502 from the endpoint",
}
USER = {"name": "alice", "role": "admin", "os_user": "alice.smith", "quota_gpus": 4}


def _render(renderable: RenderableType, width: int) -> str:
    out = io.StringIO()
    Console(file=out, width=width, force_terminal=False).print(renderable)
    return out.getvalue()


def _tables() -> list[tuple[RenderableType, list[str], str]]:
    """Each admin table, its headers and the name or id its first column shows."""
    projects = project_cli._projects_table([PROJECT])
    webhooks = webhook_cli._webhooks_table([WEBHOOK])
    users = admin_cli._users_table([USER])
    return [
        (
            projects,
            [
                "project",
                "priority",
                "GPU quota",
                "GPU memory quota",
                "share",
                "GPUs held",
                "recent GPUs",
                "members",
            ],
            "vision",
        ),
        (
            webhooks,
            ["ID", "URL", "STATES", "FOR", "PENDING", "DELIVERED", "FAILED", "LAST ERROR"],
            "whk_0123",
        ),
        (users, ["user", "role", "OS account", "GPU quota"], "alice"),
    ]


@pytest.mark.parametrize("width", [80, 60])
def test_admin_tables_fit_without_breaking_a_header_word(width: int) -> None:
    for table, headers, first in _tables():
        text = _render(table, width)
        assert max(len(line) for line in text.splitlines()) <= width, text
        assert "…" not in text, text
        words = set(re.findall(r"[\w.-]+", text))
        for header in headers[1:]:  # the first's: only a table shows it
            for word in header.split():
                assert word in words, f"{word!r} broken in:\n{text}"
        assert first in words, text


def test_project_ls_at_80_columns_is_a_table() -> None:
    """80 columns hold every header word of ``project ls``: the table, not lines."""
    text = _render(project_cli._projects_table([PROJECT]), 80)
    assert "┃ project ┃ priority ┃" in text, text


def test_a_table_too_narrow_is_a_line_per_record() -> None:
    text = _render(project_cli._projects_table([PROJECT]), 60)
    flat = " ".join(text.split())
    assert flat.startswith("projects vision priority: 10 GPU quota: 8"), text
    assert "members: alice, bob" in flat, text


def test_record_lines_show_server_text_as_text() -> None:
    """A cell is markup that shows server text as it is (``as_text``): ``[b]`` stays."""
    hook = WEBHOOK | {"id": "whk_[b]x", "last_error": "boom [/x]"}
    text = _render(webhook_cli._webhooks_table([hook]), 40)
    flat = " ".join(text.split())
    assert "whk_[b]x" in flat and "LAST ERROR: boom [/x]" in flat, text


def test_fill_widths_gives_the_narrowest_column_room_first() -> None:
    assert fill_widths([3, 6, 5], [80, 16, 26], 20) == [7, 7, 6]  # a tie: the first
    assert fill_widths([3, 6], [4, 6], 100) == [4, 6]  # none wider than it wants
    assert fill_widths([3, 6], [80, 80], 5) == [3, 6]  # never under a floor


def test_a_header_given_as_markup_is_measured_as_shown() -> None:
    table = titled_table("t", ("ID", r"loss\[val]"), [("1", "0.5")])
    floors = dict(table.FLOORS)
    assert floors == {r"loss\[val]": len("loss[val]")}
    assert Text.from_markup(r"loss\[val]").plain in _render(table, 80)
