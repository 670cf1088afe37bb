"""A Ray run's launch record whose ``offsets`` list another number of entries than its
``actors``: the poll asked only as many actors as there were offsets (``zip`` cut the longer
list short), so a two-node run whose first node had exited was taken as ended, and
succeeded, while its second node's command still ran. It is an :class:`ExecutorError` naming
the field and the fix."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_ray import FakeRay, node
from run_helpers import launch

from danlu.executors import ExecutorError, GpuSlot, RunState, ray_executor, supervise

SRC = str(Path(__file__).resolve().parents[2] / "src")
CODE = (
    "import os, time\n"
    "if os.environ['PET_NODE_RANK'] == '1': time.sleep(60)\n"
    "print('node', os.environ['PET_NODE_RANK'], flush=True)\n"
)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRay]:
    ray = FakeRay([node("n1"), node("n2")]).install(monkeypatch)
    yield ray
    ray.close_all()


@pytest.mark.parametrize("offsets", [[0], [0, 0, 0]])
def test_offsets_that_do_not_match_the_actors_are_a_clear_error(
    fake: FakeRay, tmp_path: Path, offsets: list[int]
) -> None:
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": SRC}
    ex: Any = ray_executor.RayExecutor(tmp_path / "state", address=None, base_env=base)
    handle = ex.submit(launch("offs-1", CODE, gpus=(GpuSlot(0, 0), GpuSlot(1, 0))))
    first = fake.actors[f"danlu.offs-1.{handle.attempt}.0"].instance
    for _ in range(300):  # node 0's command exits; node 1's sleeps on
        assert ex.poll(handle).state is RunState.RUNNING
        if first.exit_code() is not None:
            break
        time.sleep(0.05)
    assert first.exit_code() == 0
    record_path = tmp_path / "state" / "runs" / "offs-1" / supervise.LAUNCH
    record = json.loads(record_path.read_text())
    record["offsets"] = offsets
    record_path.write_text(json.dumps(record))
    with pytest.raises(ExecutorError, match=r"offsets for 2 Ray actors: remove its \"offsets\""):
        ex.poll(handle)
    # the run still runs: removing the field, as the error says, polls it again
    del record["offsets"]
    record_path.write_text(json.dumps(record))
    assert ex.poll(handle).state is RunState.RUNNING
    ex.cancel(handle)
