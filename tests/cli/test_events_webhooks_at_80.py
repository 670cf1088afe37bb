"""``danlu events`` and ``danlu webhook ls`` at 80 columns: each folded its columns down to
a few characters (``admin/defa`` over ``ult``, the time over two lines, a URL five characters
a line, ``SUCCEE`` over ``DED``). Narrow, each record is now one line, as the other tables
do (:class:`danlu.cli.fitted_table.FittedTable`), folded when long and never cut; wide, the
table."""

from __future__ import annotations

import io
import re

from rich.console import Console, RenderableType

from danlu.cli import events as events_cli
from danlu.cli import webhook as webhook_cli

EVENT = {
    "id": 7,
    "time": 1_796_580_860.0,
    "job_id": "ceeb78f6bfdb",
    "job_name": "acc-sweep-0",
    "user": "admin",
    "project": "default",
    "old": "RUNNING",
    "new": "SUCCEEDED",
    "reason": "exited 0",
}
WEBHOOK = {
    "id": "f1770d0ee756",
    "url": "https://hooks.example.com/services/T000/B000/XXXXXXXXXXXXXXXX",
    "states": ["SUCCEEDED", "FAILED", "CANCELLED"],
    "project": "default",
    "pending": 0,
    "delivered": 3,
    "failed": 1,
    "last_error": "HTTP 502 from the endpoint",
}


def _render(renderable: RenderableType, width: int) -> str:
    out = io.StringIO()
    Console(file=out, width=width, force_terminal=False).print(renderable)
    return out.getvalue()


def _joined(text: str) -> str:
    """The printed text without its box drawing and line breaks, spaces squeezed."""
    return re.sub(r"\s+", " ", re.sub(r"[│┃┏┓┗┛┡┩└┘━─┳┻╇┴┬┼]", " ", text))


def test_events_at_80_columns_are_lines_with_every_word_whole() -> None:
    shown = _render(events_cli.table([EVENT, EVENT | {"id": 8, "job_id": "fc31d80076d5"}]), 80)
    assert "┃" not in shown and "│" not in shown  # no table squeezed into 80 columns
    lines = shown.splitlines()
    assert all(len(line) <= 80 for line in lines)
    for word in ("admin/default", "acc-sweep-0", "RUNNING -> SUCCEEDED", "ceeb78f6bfdb"):
        assert word in shown, shown
    assert "exited 0" in _joined(shown)
    assert "fc31d80076d5" in shown


def test_events_wide_are_a_table_with_each_cell_on_one_line() -> None:
    shown = _render(events_cli.table([EVENT]), 130)
    row = [line for line in shown.splitlines() if "ceeb78f6bfdb" in line]
    assert len(row) == 1, shown
    for cell in ("admin/default", "acc-sweep-0", "RUNNING -> SUCCEEDED", "exited 0"):
        assert cell in row[0], shown


def test_webhook_ls_at_80_columns_is_lines_with_the_url_whole() -> None:
    shown = _render(webhook_cli._webhooks_table([WEBHOOK]), 80)
    assert "┃" not in shown, shown
    assert WEBHOOK["url"] in shown  # on one line, not five characters a line
    assert "SUCCEEDED,FAILED,CANCELLED" in _joined(shown).replace(", ", ",")
    assert "HTTP 502 from the endpoint" in _joined(shown)
    assert all(len(line) <= 80 for line in shown.splitlines())


def test_webhook_ls_wide_is_a_table() -> None:
    shown = _render(webhook_cli._webhooks_table([WEBHOOK]), 160)
    assert "┃" in shown
    row = [line for line in shown.splitlines() if "f1770d0ee756" in line]
    assert len(row) == 1 and "SUCCEEDED,FAILED,CANCELLED" in row[0], shown
