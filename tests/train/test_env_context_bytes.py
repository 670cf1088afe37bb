"""``DANLU_GPU_CONTEXT_BYTES``, the CUDA context the control plane allowed for on the job's GPU
type, is read as a byte count (digits, or a size with a unit as ``DANLU_GPU_MEMORY_LIMIT``
is), unset is None (the built-in GPU table's figure then), and a value that is no byte count
of 0 or more is a ``ConfigError`` naming the variable; ``init`` hands it to the memory cap."""

from __future__ import annotations

import pytest
import torch
from train_helpers import tiny_model

import danlu.train as dt
import danlu.train.build as build
from danlu.core.errors import ConfigError
from danlu.train.env import JobEnv

MiB = 1024**2
GiB = 1024**3


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("314572800", 300 * MiB), ("300MiB", 300 * MiB), (" 768MiB\r", 768 * MiB), ("0", 0)],
)
def test_the_context_bytes_are_read_as_a_byte_count(raw: str, expected: int) -> None:
    env = JobEnv.from_environ({"DANLU_GPU_CONTEXT_BYTES": raw})
    assert env.gpu_context_bytes == expected


@pytest.mark.parametrize("raw", [None, "", "  "])
def test_unset_context_bytes_are_none(raw: str | None) -> None:
    environ = {} if raw is None else {"DANLU_GPU_CONTEXT_BYTES": raw}
    assert JobEnv.from_environ(environ).gpu_context_bytes is None


@pytest.mark.parametrize("raw", ["-1", "-300MiB", "lots", "300 apples", "1_000"])
def test_context_bytes_that_are_no_byte_count_are_refused_by_name(raw: str) -> None:
    with pytest.raises(ConfigError, match="DANLU_GPU_CONTEXT_BYTES"):
        JobEnv.from_environ({"DANLU_GPU_CONTEXT_BYTES": raw})


class _CapSet(Exception):
    """Raised by the recording cap: ``init`` stops there."""


def test_init_gives_the_memory_cap_the_control_planes_allowance(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[tuple[int | None, int | None]] = []

    def record(limit: int | None, device: torch.device, context: int | None = None) -> None:
        seen.append((limit, context))
        raise _CapSet

    monkeypatch.setattr(build, "apply_memory_limit", record)
    model = tiny_model()
    environ = {"DANLU_GPU_MEMORY_LIMIT": "8GiB", "DANLU_GPU_CONTEXT_BYTES": "300MiB"}
    with pytest.raises(_CapSet):
        dt.init(
            model,
            torch.optim.SGD(model.parameters(), lr=0.01),
            global_batch_size=8,
            environ=environ,
            metrics_file=False,
        )
    assert seen == [(8 * GiB, 300 * MiB)]
