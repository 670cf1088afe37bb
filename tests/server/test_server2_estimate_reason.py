"""A failed memory estimate's reason, which becomes the job's pending reason, shows the
control characters of the user's model's error (a NUL PostgreSQL's text cannot hold, a
terminal's escapes) as ``?``; its lines stay lines."""

from __future__ import annotations

from typing import Any

import pytest

from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.core.errors import DataError, SpecError
from danlu.core.spec import parse_spec
from danlu.estimate.memory import predict
from danlu.server.routes.estimation import resolve_memory

CLUSTER = Cluster((Node("n0", 4, gpu_type("H100")),), name="t")


def _auto() -> Any:
    return parse_spec(
        {
            "name": "j",
            "command": ["true"],
            "resources": {"gpus": 1, "gpu_memory": "auto"},
            "training": {"model": "danlu.estimate.zoo:resnet_tiny"},
        }
    )


@pytest.mark.parametrize(
    "error",
    [
        DataError("tracing m failed: bad\x00 value \x1b[2J\nTraceback:\tline"),
        SpecError("MODEL_REF", "bad\x00 value \x1b[2J\nTraceback:\tline"),
    ],
)
def test_a_failed_trace_s_reason_has_no_control_characters(
    monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    def failing(
        req: Any, progress: Any = None, timeout_s: float = 60.0, workers: Any = None
    ) -> Any:
        raise error

    monkeypatch.setattr(predict, "trace", failing)
    estimate, _ = resolve_memory(_auto(), CLUSTER, 120.0)
    assert estimate.gpu_memory is None and estimate.note is not None
    assert "bad? value ?[2J\nTraceback:\tline" in estimate.note
    assert estimate.note.startswith("memory estimate failed (")
