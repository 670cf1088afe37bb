"""The admin tables (``danlu user ls``, ``user tokens``, ``project ls``, ``webhook ls``,
``webhook deliveries``) align their columns as ``danlu ls``, ``danlu nodes`` and ``danlu
sweep ls`` do: text left, numbers right. They right-aligned every column but the first,
names, roles, states, URLs and errors included."""

from __future__ import annotations

import pytest
import typer
from cli_fake_api import invoke, serve_replies

from danlu.cli import admin as admin_cli
from danlu.cli import webhook as webhook_cli

USERS = [
    {"name": "admin", "role": "admin", "os_user": None, "quota_gpus": None, "disabled_at": None},
    {"name": "alice", "role": "user", "os_user": "alice-os", "quota_gpus": 8, "disabled_at": None},
    {"name": "bob", "role": "user", "os_user": None, "quota_gpus": 16, "disabled_at": 1.8e9},
]
TOKENS = [
    {"prefix": "e470d4dc", "name": "laptop", "job_id": None, "created_at": 1.8e9},
    {"prefix": "09ad119f", "name": "ci", "job_id": "ceeb78f6bfdb", "created_at": 1.8e9},
]
PROJECTS = [
    {
        "name": "research",
        "priority": 15,
        "quota_gpus": 16,
        "quota_gpu_memory": None,
        "share": 2,
        "gpus_held": 12.5,
        "recent_gpus": None,
        "members": [],
    },
    {
        "name": "vision",
        "priority": 0,
        "quota_gpus": None,
        "quota_gpu_memory": 640 << 30,
        "share": 1,
        "gpus_held": 0,
        "recent_gpus": 1.25,
        "members": ["alice", "bob"],
    },
]
HOOKS = [
    {
        "id": "78077f2c0c78",
        "url": "https://hooks.example/danlu",
        "states": ["FAILED"],
        "project": "research",
        "pending": 12,
        "delivered": 3,
        "failed": 0,
        "last_error": "HTTP 502 from the endpoint",
    },
    {
        "id": "3b9112f7bc30",
        "url": "http://127.0.0.1:9/x",
        "states": ["SUCCEEDED", "FAILED"],
        "pending": 0,
        "delivered": 140,
        "failed": 1,
        "last_error": None,
    },
]
DELIVERIES = [
    {
        "id": 12,
        "created_at": 1.8e9,
        "kind": "ping",
        "attempts": 1,
        "delivered": True,
        "status_code": 200,
    },
    {
        "id": 9,
        "created_at": 1.8e9,
        "kind": "ping",
        "attempts": 10,
        "next_attempt_at": 1.8e9,
        "last_error": "HTTP 502",
    },
]

TABLES = [
    (("user", "ls"), {"GPU quota"}),
    (("user", "tokens", "alice"), set()),
    (
        ("project", "ls"),
        {"priority", "GPU quota", "GPU memory quota", "share", "GPUs held", "recent GPUs"},
    ),
    (("webhook", "ls"), {"PENDING", "DELIVERED", "FAILED"}),
    (("webhook", "deliveries", "78077f2c0c78"), {"ATTEMPTS"}),
]
"""Each command and the headers of its columns of numbers (every other column is text)."""


def _columns(out: str) -> dict[str, list[str]]:
    """The cells of the table ``out`` prints, by header, each with its padding."""
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("┃"))
    titles = [cell.strip() for cell in header.strip("┃").split("┃")]
    rows = [line.strip("│").split("│") for line in lines if line.startswith("│")]
    assert rows, out
    return {title: [row[i] for row in rows] for i, title in enumerate(titles)}


@pytest.mark.parametrize(("command", "numbers"), TABLES, ids=[" ".join(c) for c, _ in TABLES])
def test_admin_tables_align_text_left_and_numbers_right(
    monkeypatch: pytest.MonkeyPatch, command: tuple[str, ...], numbers: set[str]
) -> None:
    serve_replies(
        monkeypatch,
        {
            "/users": USERS,
            "/users/alice/tokens": TOKENS,
            "/projects": PROJECTS,
            "/webhooks": HOOKS,
            "/webhooks/78077f2c0c78/deliveries": DELIVERIES,
        },
    )
    app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
    admin_cli.register(app)
    webhook_cli.register(app)
    code, out, err = invoke(app, *command)
    assert code == 0, out + err
    columns = _columns(out)
    assert numbers <= set(columns), columns
    narrower = set()  # the kinds of column with a cell narrower than it: aligned one way
    for title, cells in list(columns.items())[1:]:  # the first column: left, always
        for cell in (cell for cell in cells if cell.strip()):
            # one blank of padding, then the text (or the number, then one blank)
            edge = cell[-2] if title in numbers else cell[1]
            assert edge != " ", (command, title, cells)
            if len(cell.strip()) < len(cell) - 2:
                narrower.add(title in numbers)
    assert narrower == ({True, False} if numbers else {False}), out  # else a weak check
