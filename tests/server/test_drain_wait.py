"""``danlu drain NODE --wait``: the drain, then a wait until no job holds the node's (or the
GPU's) GPUs, as ``kubectl drain`` blocks until the node is empty; 124 when --timeout passes
first."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import live_server, spec, submit, wait_state
from rich.console import Console
from typer.testing import CliRunner

from danlu.cli import jobs as jobs_cli
from danlu.cli import nodes as nodes_cli
from danlu.cli.main import app


def test_drain_waits_until_the_node_is_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobs_cli, "console", Console(width=200))
    monkeypatch.setattr(nodes_cli, "DRAIN_POLL", 0.2)
    with live_server(tmp_path, fake_gpus="2x80GiB") as live:
        flags = ["--url", live.url, "--token", live.token]

        def danlu(*args: str) -> tuple[int, str]:
            result = CliRunner().invoke(app, [*args, *flags])
            return result.exit_code, result.stdout + result.stderr

        with live.client() as c:
            name = c.get("/cluster/nodes").json()[0]["name"]
            # preempted by the drain: it exits on SIGTERM; not preemptible: runs on
            movable = submit(c, spec("movable", "import time; time.sleep(120)"))
            # the pinned job runs until the test lets it end (a fixed sleep could be over
            # before the first drain on a busy machine)
            release = tmp_path / "release"
            until_released = (
                f"import os, time\nwhile not os.path.exists({str(release)!r}): time.sleep(0.05)"
            )
            pinned = submit(c, spec("pinned", until_released, preemptible=False))
            wait_state(c, movable["id"], "RUNNING")
            wait_state(c, pinned["id"], "RUNNING")
        code, out = danlu("drain", name, "--wait", "--timeout", "1")
        assert code == 124, out
        assert f"waiting for 2 job(s) on {name}" in out or f"waiting for 1 job(s) on {name}" in out
        assert f"timed out: 1 job(s) still on {name}" in out, out
        release.touch()
        code, out = danlu("drain", name, "--wait", "--timeout", "2m")
        assert code == 0 and f"{name} is empty" in out, out
        with live.client() as c:
            assert c.get(f"/jobs/{pinned['id']}").json()["state"] == "SUCCEEDED"
            assert c.get(f"/jobs/{movable['id']}").json()["state"] == "PENDING"
            listed = c.get("/cluster/nodes").json()[0]
            assert listed["state"] == "draining" and not any(g["jobs"] for g in listed["gpus"])
        # refused: --wait with --at, --timeout without --wait, a bad --timeout
        code, out = danlu("drain", name, "--wait", "--at", "+1h")
        assert code == 2 and "--wait: waits for a drain done now" in out
        code, out = danlu("drain", name, "--timeout", "5m")
        assert code == 2 and "--timeout: applies to --wait" in out
        code, out = danlu("drain", name, "--wait", "--timeout", "soon")
        assert code == 2 and "--timeout" in out


def test_holders_reads_the_node_or_one_gpu() -> None:
    node = {"gpus": [{"index": 0, "jobs": ["b", "a"]}, {"index": 1, "jobs": ["a", "c"]}]}
    assert nodes_cli.holders(node) == ["a", "b", "c"]
    assert nodes_cli.holders(node, 1) == ["a", "c"]
    assert nodes_cli.holders({"gpus": []}) == []
