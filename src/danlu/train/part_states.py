"""The parts' states of a checkpoint, read and checked before a resume loads anything.

A :class:`~danlu.train.context.TrainContext`'s checkpoint keeps, in its ``data_state``, the
state of each part (batch, LR, anomaly guard, norm cadence, goodput tuner, gradient-noise
estimate). Each part's ``parse_state_dict`` checks its state and returns the function that
loads it, which cannot fail: :func:`parse_parts` runs every check before the model and the
optimizer are loaded, so a checkpoint refused for a part's state leaves every live object as
it was (the loads used to run one after another, after the model and optimizer were loaded:
a damaged ``anomaly`` state was refused once the model, the optimizer, the batch and the LR
held the checkpoint's).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Load = Callable[[], None]
"""Loads a part's checked state into it; cannot fail."""
Parse = Callable[[dict[str, Any]], Load]
"""A part's ``parse_state_dict``: checks a state (raising one of :data:`REFUSED`), returns
its :data:`Load`."""

REFUSED = (KeyError, TypeError, ValueError, IndexError, OverflowError)
"""What a part's check raises for a state this danlu does not read (a damaged checkpoint,
or one written by another version; an integer beyond a float's range, where a float is
read, is an OverflowError)."""


def parse_parts(
    data_state: Mapping[str, Any],
    parsers: Mapping[str, Parse | None],
    refuse: Callable[[str], Exception],
) -> list[Load]:
    """The loads of the parts' states in ``data_state``, in the order of ``parsers`` (part
    name to its parser; None: a part this run does not have). A part whose state is None
    (a run without it) is left out. A state a parser refuses raises ``refuse(problem)``
    (chained from the parser's error), ``problem`` naming the part and the error: nothing
    is loaded."""
    loads: list[Load] = []
    for part, parse in parsers.items():
        stored = data_state.get(part)
        if parse is None or stored is None:
            continue
        try:
            loads.append(parse(stored))
        except REFUSED as exc:  # was raw
            problem = f"its {part!r} state is not one this danlu reads"
            raise refuse(f"{problem} ({type(exc).__name__}: {exc})") from exc
    return loads
