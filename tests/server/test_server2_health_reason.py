"""The health program's first line as a node's cordon reason: its control characters (a NUL
PostgreSQL's text cannot hold, a terminal's escapes) are shown as ``?``, a tab as a space,
so the node is closed on every backend with a reason safe to print. A GPU fault found at
every pass while the store fails is kept once, not once per pass."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest
from helpers import user_and_nodes

from danlu.core.cluster import Node, gpu_type
from danlu.core.errors import DataError
from danlu.devices.health import GpuFault
from danlu.server.db import Database
from danlu.server.health import HealthLoop, HealthProgram
from danlu.server.services import cluster, nodes

NOW = 1_000_000.0


def test_a_program_printing_control_characters_still_closes_its_node(
    db: Database, tmp_path: Path
) -> None:
    program = tmp_path / "check-node"
    program.write_text("#!/bin/sh\nprintf '\\033[31mdisk\\000\\tfull\\n'\nexit 2\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    with db.session() as s:
        user_and_nodes(s, (Node("a", 2, gpu_type("H100")),), NOW)
    loop = HealthLoop(db, None, program=HealthProgram(str(program)), hosts=["a"])
    reason = "health program: ?[31mdisk? full (exit status 2)"
    assert loop.run_once(now=NOW + 1) == [f"a: closed: {reason}"]
    with db.read_session() as s:
        [node] = cluster.list_nodes(s)
        assert (nodes.state(node), node.cordon_reason) == ("cordoned", reason)


def test_a_line_of_control_characters_only_is_a_reason_too(tmp_path: Path) -> None:
    program = tmp_path / "check-node"
    program.write_text("#!/bin/sh\nprintf '\\000\\n'\nexit 1\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    result = HealthProgram(str(program)).run()
    assert result is not None and not result.passed
    assert result.reason == "? (exit status 1)"


class _Steady:
    """A health check that finds the same fault at every pass (an uncorrected ECC error)."""

    def check(self) -> list[GpuFault]:
        return [GpuFault(("a", 1), "uncorrected ECC errors: reset the GPU")]

    def close(self) -> None:
        """Nothing to release."""


def test_a_fault_found_while_the_store_fails_is_written_once(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    with db.session() as s:
        user_and_nodes(s, (Node("a", 2, gpu_type("H100")),), NOW)
    real = nodes.close_faulty
    written: list[list[tuple[str, int, str]]] = []

    def failing_then_real(session: Any, rows: Any, *args: Any, **kwargs: Any) -> list[str]:
        written.append(list(rows))
        if len(written) <= 3:
            raise DataError("the store is busy")
        return real(session, rows, *args, **kwargs)

    monkeypatch.setattr(nodes, "close_faulty", failing_then_real)
    loop = HealthLoop(db, _Steady())
    for i in range(3):
        with pytest.raises(DataError):
            loop.run_once(now=NOW + i)
    fault = ("a", 1, "uncorrected ECC errors: reset the GPU")
    assert written == [[fault]] * 3  # not [fault] * 2, then * 3 ...
    assert loop.run_once(now=NOW + 3) == [
        "a GPU 1: health check: uncorrected ECC errors: reset the GPU"
    ]
    assert written[-1] == [fault]
