"""``JobLaunch.gpu_context_bytes`` (the CUDA context the control plane's estimate allowed for on
the job's GPU type) reaches the job as ``DANLU_GPU_CONTEXT_BYTES`` under every executor (they
share the env builder), is absent when the launch has none (a spec's own value too, as the
other optional job variables), and a launch with one that is no byte count is refused by
field."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_job_env import BUILDERS

from danlu.executors import GpuSlot, JobLaunch
from danlu.executors.errors import InvalidLaunchError

MiB = 1024**2
SHARE = (GpuSlot(0, 0, 8 << 30),)


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_every_executor_tells_the_job_the_planned_context(name: str, tmp_path: Path) -> None:
    job = JobLaunch("j-1", ("python", "train.py"), gpus=SHARE, gpu_context_bytes=300 * MiB)
    env = BUILDERS[name](tmp_path, job)
    assert env["DANLU_GPU_CONTEXT_BYTES"] == str(300 * MiB)
    assert env["DANLU_GPU_MEMORY_LIMIT"] == str(8 << 30)


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_a_launch_without_one_tells_none(name: str, tmp_path: Path) -> None:
    job = JobLaunch("j-1", ("python", "t.py"), env={"DANLU_GPU_CONTEXT_BYTES": "1"}, gpus=SHARE)
    assert "DANLU_GPU_CONTEXT_BYTES" not in BUILDERS[name](tmp_path, job)


@pytest.mark.parametrize("bad", [-1, 1.5, "300MiB"])
def test_a_launch_with_another_value_is_refused_by_field(bad: object) -> None:
    with pytest.raises(InvalidLaunchError) as caught:
        JobLaunch("j-1", ("python", "train.py"), gpu_context_bytes=bad)  # type: ignore[arg-type]
    assert caught.value.field == "gpu_context_bytes"
