"""A fake of :func:`danlu.estimate.memory.trace` for tests of ``danlu estimate``'s command."""

from __future__ import annotations

from collections.abc import Callable

import danlu.estimate.memory as memory
from danlu.estimate.memory import StepTrace, TraceRequest


def canned_traces(
    traced: dict[int, StepTrace], *, lone_sample: bool, asked: list[tuple[int, ...]]
) -> Callable[..., list[StepTrace]]:
    """The command's traces served from ``traced`` (each request's batch sizes appended to
    ``asked``); a request holding batch 1 raises :class:`LoneSampleError` when
    ``lone_sample`` (as a model with batch normalisation)."""

    def fake(req: TraceRequest, *args: object, **kwargs: object) -> list[StepTrace]:
        asked.append(req.batch_sizes)
        if lone_sample and 1 in req.batch_sizes:
            raise memory.LoneSampleError("cannot train on a batch of 1 sample")
        return [traced[b] for b in req.batch_sizes]

    return fake
