"""``danlu nodes`` and ``danlu top`` for a user who is not an admin: ``GET /cluster/nodes``
lists their own jobs' ids on a GPU and counts the other users' jobs there (``other_jobs``); a
GPU held only by other users' jobs is shown as held (``1 job of another user``), never as
free (``-``), and the node's job count takes them in."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console, RenderableType

from danlu.cli import top
from danlu.cli.reply_fields import checked_nodes

GiB = 1024**3


def render(renderable: RenderableType, width: int) -> str:
    out = io.StringIO()
    Console(file=out, width=width, force_terminal=False).print(renderable)
    return out.getvalue()


def node() -> dict[str, Any]:
    """A node whose GPU 0 holds one job of another user's (its memory taken), GPU 1 the
    viewer's own job and two of other users', GPU 2 nothing."""
    return {
        "name": "node-0",
        "state": "ready",
        "gpus": [
            {
                "index": 0,
                "type": "H100",
                "memory": 80 * GiB,
                "allocated_memory": 80 * GiB,
                "allocated_milli": 1000,
                "jobs": [],
                "other_jobs": 1,
            },
            {
                "index": 1,
                "type": "H100",
                "memory": 80 * GiB,
                "allocated_memory": 60 * GiB,
                "allocated_milli": 750,
                "jobs": ["own000000001"],
                "other_jobs": 2,
            },
            {"index": 2, "type": "H100", "memory": 80 * GiB, "jobs": [], "other_jobs": 0},
        ],
    }


def gpu_rows(text: str) -> dict[str, str]:
    """Each GPU row of a rendered GPU table (wide, a row per line) by its index."""
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.split("│")]
        if len(cells) > 3 and cells[2].isdigit():
            rows[cells[2]] = line
    return rows


def test_a_gpu_held_by_another_users_job_is_not_shown_free_in_the_table() -> None:
    rows = gpu_rows(render(top.nodes_table([node()]), width=200))
    assert "1 job of another user" in rows["0"]
    assert rows["0"].rstrip().rstrip("│").rstrip().endswith("1 job of another user")
    assert "own000000001, 2 jobs of other users" in rows["1"]
    assert rows["2"].rstrip().rstrip("│").rstrip().endswith("-")


def test_a_gpu_held_by_another_users_job_is_not_shown_free_narrow_or_as_lines() -> None:
    narrow = render(top.nodes_table([node()]), width=100)
    assert "1 job of another user" in narrow
    assert "2 jobs of other users" in narrow
    lines = render(top.nodes_table([node()]).lines(40), width=200)
    gpu0 = next(line for line in lines.splitlines() if line.startswith("  gpu 0"))
    assert gpu0.endswith("jobs 1 job of another user")


def test_tops_node_count_takes_in_other_users_jobs() -> None:
    """The viewer's one job and at least the two other users' jobs on GPU 1 (a job of
    another user on both GPU 0 and 1 is counted once: its id is not given)."""
    text = render(top.NodeSummary([node()]).table(120), width=120)
    row = next(line for line in text.splitlines() if "node-0" in line)
    assert row.rstrip().rstrip("│").rstrip().endswith("3")
    lines = render(top.NodeSummary([node()]).lines(60), width=60)
    assert "jobs 3" in lines


def test_an_other_jobs_count_of_the_wrong_type_is_reported() -> None:
    bad = node()
    bad["gpus"][0]["other_jobs"] = "one"
    problems: list[str] = []
    checked = checked_nodes([bad], problems)
    assert "other_jobs" not in checked[0]["gpus"][0]
    assert any("other_jobs" in problem for problem in problems), problems
