"""``danlu node show NAME``: a node's record (its state since when and why, its GPUs) and
its last events, each by whom; ``--json`` both; a node gone from the inventory still shows
its history, and an unknown one is an error naming it. ``danlu node ls`` is ``danlu
nodes``. Through Typer's CliRunner against the real API app in this process on a SQLite
store."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from cli_real_api import real_api
from typer.testing import CliRunner

from danlu.cli import nodes as nodes_cli
from danlu.config import load_settings
from danlu.core.cluster import Node
from danlu.server.db import Database
from danlu.server.services import cluster

APP = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
nodes_cli.register(APP)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with real_api(tmp_path, monkeypatch):
        yield tmp_path


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(APP, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def test_a_node_is_shown_with_its_history(home: Path) -> None:
    code, out, _ = run("node", "ls")
    assert code == 0 and "localhost (fake)" in out and (code, out) == run("nodes")[:2]
    assert run("drain", "localhost", "--reason", "new DIMMs")[0] == 0
    assert run("cordon", "localhost", "--gpu", "0", "--reason", "fan")[0] == 0
    code, out, err = run("node", "show", "localhost")
    assert code == 0, err
    lines = [" ".join(line.split()) for line in out.splitlines()]
    assert "node localhost (fake)" in lines and "GPUs 1 x generic (80.0GiB)" in lines, out
    assert any(line.startswith("state draining since ") for line in lines), out
    assert any(line.endswith(": new DIMMs") for line in lines), out
    assert "closed GPUs GPU 0 [cordoned: fan]" in lines, out
    rows = [line.split("│")[2:5] for line in out.splitlines() if line.startswith("│ 2")]
    assert [[cell.strip() for cell in row] for row in rows] == [
        ["joined", "-", "in the inventory: 1x generic"],
        ["drained", "admin", "new DIMMs"],
        ["cordoned", "admin", "GPU 0: fan"],
    ], out
    code, out, _ = run("node", "show", "localhost", "--json")
    shown = json.loads(out)
    assert code == 0 and shown["node"]["state"] == "draining"
    assert [e["kind"] for e in shown["events"]] == ["joined", "drained", "cordoned"]

    db = Database(load_settings(home=home).db_url)
    with db.session() as s:
        here = cluster.load_cluster(s).nodes
        cluster.replace_inventory(s, [*here, Node("old", 1)], fake=True)
        cluster.replace_inventory(s, here, fake=True)
    db.dispose()
    code, out, err = run("node", "show", "old")
    assert code == 0, err
    assert out.splitlines()[0] == "node old: not in the inventory now", out
    assert [row.split("│")[2].strip() for row in out.splitlines() if row.startswith("│ 2")] == [
        "joined",
        "lost",
    ], out
    code, out, _ = run("node", "show", "old", "--json")
    assert code == 0 and json.loads(out)["node"] is None
    code, _, err = run("node", "show", "nosuch")
    said = " ".join(err.split())  # the console may wrap the line
    assert code == 2, err
    assert "node 'nosuch' not found (danlu nodes, GET /cluster/nodes, lists them)" in said, err
