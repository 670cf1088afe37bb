"""``danlu usage``: GPU-hours (and energy) by project and user over the last days, over the
REST client. Options, the client and errors are those of :mod:`danlu.cli.jobs`, which
registers the command."""

from __future__ import annotations

import time
from typing import Annotated, Any

from rich.table import Table

from danlu.cli import jobs as common
from danlu.cli.fitted_table import print_whole
from danlu.cli.markup import as_text
from danlu.cli.options import HomeOpt, JsonOpt, TokenOpt, UrlOpt, float_option
from danlu.cli.reply_fields import USAGE


def usage(
    days: Annotated[
        float,
        float_option("--days", help="The last N days.", example="7", low=0.001, high=36_500.0),
    ] = 7.0,
    json_out: JsonOpt = False,
    home: HomeOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """GPU-hours (and energy, where metered) by project and user over the last days (yours
    only, unless admin)."""
    now = time.time()
    data = common.ask(home, url, token, lambda c: c.usage(since=now - days * 86_400.0, until=now))
    if json_out:
        common.print_json(data)
        return
    problems: list[str] = []
    print_whole(common.console, _usage_table(USAGE.check(data, problems), days))
    common.fail_on(problems)


def _usage_table(data: list[dict[str, Any]], days: float) -> Table:
    """``danlu usage``'s table of ``GET /usage``'s rows (fields of the type the API gives
    them, :mod:`danlu.cli.reply_fields`; one left out is shown as ``-``)."""
    table = Table(title=f"GPU usage, last {days:g} days", title_justify="left")
    metered = any(row.get("energy_kwh") is not None for row in data)
    columns = ["project", "user", "GPU-hours", "GPU memory GiB-hours", "jobs"]
    for column in [*columns, "kWh"] if metered else columns:
        table.add_column(column, justify="left" if column in ("project", "user") else "right")
    for row in data:
        cells = [
            as_text(row.get("project", "-")),
            as_text(row.get("user", "-")),
            _fixed(row.get("gpu_hours"), 2),
            _fixed(row.get("gpu_memory_gib_hours"), 1),
            str(row.get("jobs", "-")),
        ]
        if metered:
            cells.append(_fixed(row.get("energy_kwh"), 3))
        table.add_row(*cells)
    return table


def _fixed(value: float | None, places: int) -> str:
    """``value`` with ``places`` decimals, or ``-`` for none."""
    return "-" if value is None else f"{value:.{places}f}"
