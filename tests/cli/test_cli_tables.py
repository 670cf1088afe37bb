"""Tables at 80 columns (a pipe, or a narrow terminal): the ids other commands take and the
memory text are never cut with an ellipsis; long text folds onto more lines."""

from __future__ import annotations

import io

from rich.console import Console, RenderableType

from danlu.cli import events as events_cli
from danlu.cli import top
from danlu.cli.titled_table import titled_table

GiB = 1024**3
IDS = ["505ac89d7cf8", "adbef97f48c8", "ce66f70de248"]


def render(renderable: RenderableType, width: int = 80) -> str:
    out = io.StringIO()
    Console(file=out, width=width, force_terminal=False).print(renderable)
    return out.getvalue()


def test_the_gpu_table_keeps_job_ids_and_memory_whole() -> None:
    node = {
        "name": "localhost",
        "fake": True,
        "state": "ready",
        "gpus": [
            {
                "index": 0,
                "type": "generic",
                "memory": 80 * GiB,
                "allocated_memory": 30 * GiB,
                "allocated_milli": 375,
                "jobs": IDS,
                "state": "cordoned",
                "cordon_reason": "Xid 79 fell off the bus at 02:00, RMA ticket 12345",
            },
            {"index": 1, "type": "generic", "memory": 80 * GiB, "jobs": [], "state": "ready"},
        ],
    }
    text = render(top.nodes_table([node]))
    assert "…" not in text, text
    assert "30.0GiB/80.0GiB" in text, text
    for job_id in IDS:
        assert job_id in text, text


def test_the_events_table_keeps_job_ids_whole() -> None:
    event = {
        "id": 1,
        "job_id": "dd90a7dc1666",
        "time": 1796130976.0,
        "old": "RUNNING",
        "new": "SUCCEEDED",
        "reason": "time limit reached: ran 2h of 2h, stopped with SIGTERM",
        "job_name": "a-rather-long-job-name",
        "user": "admin",
        "project": "default",
    }
    text = render(events_cli.table([event]))
    assert "…" not in text, text
    assert "dd90a7dc1666" in text, text


def test_titled_tables_fold_long_text() -> None:
    url = "https://hooks.example.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX"
    table = titled_table(
        "webhooks",
        ("ID", "URL", "STATES", "FOR", "PENDING", "DELIVERED", "FAILED", "LAST ERROR"),
        [("1", url, "SUCCEEDED,FAILED", "all jobs", "0", "3", "1", "HTTP 502 from the endpoint")],
    )
    text = render(table)
    assert "…" not in text, text
    cells = [row.split("│")[2].strip() for row in text.splitlines() if row.startswith("│")]
    assert "".join(cells) == url, text  # folded onto more lines, whole


def test_the_jobs_table_prints_markup_like_fields_as_they_are() -> None:
    """A job's name, id and user went to Rich as markup: ``[/x]`` crashed ``danlu ls`` and
    ``danlu top`` (a closing tag with no opening one) and ``[bold]`` vanished."""
    job = {
        "id": "[bold]505ac8",
        "name": "eval[/x]",
        "user": "[i]al",
        "state": "RUNNING",
        "priority": 0,
        "gpus": 1,
        "allocation": [{"node": "n0", "gpu": 0}],
    }
    text = render(top.jobs_table([job], now=0.0), width=160)
    assert "eval[/x]" in text and "[bold]505ac8" in text and "[i]al" in text


def test_a_scheduled_close_past_the_calendar_is_shown_not_a_traceback() -> None:
    """A close time stored before the API bounded it (milliseconds, year 58889) reads as
    seconds, where ``datetime`` raised and ``danlu nodes`` and ``danlu top`` crashed."""
    from danlu.cli.top import scheduled

    node = {"close_at": 1.8e12, "close_action": "drain", "close_reason": "ms"}
    assert scheduled(node).startswith("drain at 1.8e+12 s after 1970 (in ")
