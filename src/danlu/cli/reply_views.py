"""How the replies of the admin commands, ``danlu webhook`` and ``danlu sweep`` are shown:
as JSON with ``--json``, else as a line or a table, checked against the kind of record they
are (:func:`show_data`); and the times and GPU counts in them, in words."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rich.console import RenderableType

from danlu.cli import jobs as common
from danlu.cli.fitted_table import print_whole
from danlu.cli.reply_fields import Record


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


def when_text(stamp: float | None, layout: str = "%Y-%m-%d %H:%M") -> str:
    """``stamp`` (POSIX seconds) in local time as ``layout`` has it; ``-`` for none."""
    if stamp is None:
        return "-"
    return time.strftime(layout, time.localtime(stamp))


def gpu_count(gpus: float) -> str:
    """A number of GPUs in words: ``1 GPU``, ``0.5 GPU`` (a part of one), ``2 GPUs``, ``0
    GPUs``."""
    return f"{gpus:g} GPU" + ("" if 0 < gpus <= 1 else "s")
