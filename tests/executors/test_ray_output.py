"""The Ray executor's log of a run and the GPU types of Ray's nodes, without a Ray cluster:
lines longer than an actor hands out at once stay whole in the job's log, on one node and
across the nodes of a gang (:mod:`danlu.executors.ray_output`, through the executor and a fake
Ray, :mod:`fake_ray`), and a node's sized ``accelerator_type`` wins over Ray's size-less name
(:mod:`danlu.executors.ray_nodes`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_ray import FakeRay, node
from run_helpers import launch, wait

from danlu.core.cluster import GPU_TYPES
from danlu.executors import GpuSlot, Outcome, ray_actor, ray_executor
from danlu.executors.ray_nodes import node_gpu_type
from danlu.executors.ray_output import append_output

SRC = str(Path(__file__).resolve().parents[2] / "src")

# Each node writes a 300-byte line in pieces, then a line without its newline as it exits.
LONG_LINES = (
    "import os, sys, time\n"
    "letter = 'AB'[int(os.environ['PET_NODE_RANK'])]\n"
    "for _ in range(10):\n"
    "    sys.stdout.write(letter * 30); sys.stdout.flush(); time.sleep(0.03)\n"
    "sys.stdout.write('\\nshort ' + letter + '\\n' + letter * 100); sys.stdout.flush()\n"
)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRay]:
    ray = FakeRay([node("n1"), node("n2")]).install(monkeypatch)
    monkeypatch.setattr(ray_actor, "CHUNK", 64)
    yield ray
    ray.close_all()


def _executor(tmp_path: Path) -> Any:
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": SRC}
    return ray_executor.RayExecutor(tmp_path / "state", address=None, base_env=base)


def test_a_line_longer_than_a_piece_stays_whole_on_one_node(fake: FakeRay, tmp_path: Path) -> None:
    ex = _executor(tmp_path)
    handle = ex.submit(launch("long-1", LONG_LINES, gpus=(GpuSlot(0, 0),)))
    assert wait(ex, handle).outcome is Outcome.SUCCEEDED
    log = ex.logs(handle)[0].decode()
    assert log == "A" * 300 + "\nshort A\n" + "A" * 100 + "\n"


def test_the_long_lines_of_a_gangs_nodes_stay_whole(fake: FakeRay, tmp_path: Path) -> None:
    ex = _executor(tmp_path)
    handle = ex.submit(launch("long-2", LONG_LINES, gpus=(GpuSlot(0, 0), GpuSlot(1, 0))))
    assert wait(ex, handle).outcome is Outcome.SUCCEEDED
    lines = ex.logs(handle)[0].decode().split("\n")
    assert lines[-1] == ""  # the log ends at a line's end
    assert sorted(lines[:-1]) == sorted(
        ["A" * 300, "B" * 300, "short A", "short B", "A" * 100, "B" * 100]
    )


def _answer(output: bytes, exit_code: int | None = None, more: bool = False) -> dict[str, Any]:
    return {"output": output, "exit_code": exit_code, "more": more}


def test_a_piece_of_a_line_is_left_open_and_the_others_wait(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    first = append_output(str(log), [_answer(b"aaaa"), _answer(b"b1\nbb")], None)
    assert log.read_bytes() == b"aaaa" and first.taken == {0} and first.open_line == 0
    second = append_output(str(log), [_answer(b"aa\n"), _answer(b"b1\nbb")], 0)
    assert second.taken == {0, 1} and second.open_line == 1
    assert log.read_bytes() == b"aaaaaa\nb1\nbb"


def test_an_open_line_is_closed_when_its_node_is_silent_or_gone(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_bytes(b"aaaa")
    silent = append_output(str(log), [_answer(b""), _answer(b"b\n")], 0)
    assert silent.taken == {1} and silent.open_line is None
    assert log.read_bytes() == b"aaaa\nb\n"
    log.write_bytes(b"aaaa")
    gone = append_output(str(log), [None, _answer(b"")], 0)
    assert gone.taken == frozenset() and gone.open_line is None
    assert log.read_bytes() == b"aaaa\n"


def test_an_exited_commands_last_piece_ends_its_line(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    still = append_output(str(log), [_answer(b"x" * 8, exit_code=0, more=True)], None)
    assert still.open_line == 0 and log.read_bytes() == b"x" * 8
    last = append_output(str(log), [_answer(b"yy", exit_code=0, more=False)], 0)
    assert last.open_line is None and log.read_bytes() == b"x" * 8 + b"yy\n"


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        ({"accelerator_type:A100": 1.0}, "A100-80GB"),
        ({"accelerator_type:A100": 1.0, "accelerator_type:A100-40G": 1.0}, "A100-40GB"),
        ({"accelerator_type:A100-40G": 1.0, "accelerator_type:A100": 1.0}, "A100-40GB"),
        ({"accelerator_type:A100-80G": 1.0}, "A100-80GB"),
        ({"accelerator_type:H100": 1.0}, "H100"),
        ({"accelerator_type:B999": 1.0}, "generic"),
        ({}, "generic"),
    ],
    ids=["a100", "a100-and-40g", "40g-first", "a100-80g", "h100", "unknown", "none"],
)
def test_a_nodes_gpu_type_is_its_most_specific_accelerator_type(
    resources: dict[str, float], expected: str
) -> None:
    assert node_gpu_type(resources, GPU_TYPES["generic"]).name == expected
