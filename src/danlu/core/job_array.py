"""Job arrays: one job spec run once per index, as Slurm's ``--array`` does.

``danlu submit job.yaml --array 0-99%8`` (or the spec's own ``array: "0-99%8"``) runs the
spec 100 times, at most 8 at once; each task is a job named ``<name>-<n>`` that finds its
index in ``DANLU_ARRAY_INDEX`` (``danlu.train.env.JobEnv.array_index``) and, when the spec
names a ``checkpoint_dir``, checkpoints in ``<checkpoint_dir>/<name>-<n>``, a directory of its
own (:func:`danlu.core.sweep.trial_checkpoint_dir`). The control plane
runs an array as a sweep (:mod:`danlu.core.sweep`) with ``array: true``: a grid over one
parameter, ``index``, without a metric, ``parallel`` tasks at most queued or running at a
time, so ``danlu sweep show / cancel`` follow and stop it.

The range, as Slurm writes it: ``0-99`` (both ends included), ``1-99:2`` (a step), ``1,3,8``
(a list), ``0-9,20-29`` (several), and ``%N`` at the end for at most ``N`` at once (default:
every task). Each index is listed once (``3,1,2,3`` is refused, as the API refuses it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from danlu.core.errors import SpecError
from danlu.core.spec_text import yaml_kind
from danlu.core.sweep import ARRAY_PARAMETER, MAX_PARALLEL, MAX_VALUES
from danlu.core.values import show_number

MAX_ARRAY_INDEX = 10_000_000
"""The largest index a task may have."""
_PART = re.compile(r"^([0-9]+)(?:-([0-9]+)(?::([0-9]+))?)?\Z")
"""One part of a range; ASCII digits only (``\\d`` and ``str.isdigit`` take other scripts'
digits and superscripts, which ``int`` reads differently or not at all)."""


@dataclass(frozen=True, slots=True)
class ArrayRange:
    """The indices of a job array's tasks, in order, and how many may run at once."""

    indices: tuple[int, ...]
    parallel: int


def parse_array(text: str | int, field: str = "array") -> ArrayRange:
    """Read ``0-99%8``-style text (see the module docstring); errors name ``field``. An
    index listed twice (``3,1,2,3``, ``0-9,5``) is refused, as the API refuses it in a
    sweep body (:func:`danlu.core.sweep.parse_sweep`), rather than merged.

    A whole number is its one index (a spec's ``array: 7``, which YAML reads as a number);
    anything else that is not text (``array: [1, 2]``, ``array: true``) is refused."""
    fix = "write e.g. 0-99, 1-99:2, 1,3,8 or 0-99%8"
    if isinstance(text, int) and not isinstance(text, bool):
        wrong = index_out_of_range(text)  # and no str() of one past 4,300 digits
        if wrong is not None:
            raise SpecError(field, wrong)
        text = str(text)
    if not isinstance(text, str):
        raise SpecError(
            field,
            f"expected an index range as text, got {yaml_kind(text)}: write it as text, "
            "e.g. '0-99', '1,3,8' or '0-99%8'",
        )
    body, percent, limit_text = text.strip().partition("%")
    indices: set[int] = set()
    for part in body.split(","):
        match = _PART.match(part.strip())
        if match is None and _PART.match(part.strip().removeprefix("-")):  # -3, -1-5
            raise SpecError(
                field,
                f"{part.strip()!r} has an index below 0: an index lies within "
                f"0..{MAX_ARRAY_INDEX:,}",
            )
        if match is None:
            raise SpecError(field, f"{text!r} is not an index range; {fix}")
        first = _number(match.group(1))
        last = _number(match.group(2)) if match.group(2) is not None else first
        step = _number(match.group(3)) if match.group(3) is not None else 1
        if last < first or step < 1:
            raise SpecError(field, f"{part.strip()!r} runs backwards or has a step of 0; {fix}")
        if last > MAX_ARRAY_INDEX:
            raise SpecError(field, f"an index is at most {MAX_ARRAY_INDEX:,}")
        span = range(first, last + 1, step)
        if len(span) <= MAX_VALUES:  # a repeat is named before the size (``0-999,0``)
            repeated = next((index for index in span if index in indices), None)
            if repeated is not None:
                raise SpecError(field, f"index {repeated} is listed twice; list each index once")
        if len(span) + len(indices) > MAX_VALUES:
            raise SpecError(field, f"an array has at most {MAX_VALUES:,} tasks")
        indices.update(span)
    unique = tuple(sorted(indices))
    parallel = len(unique)
    if percent:
        limit = limit_text.strip()
        if not (limit.isascii() and limit.isdecimal()) or _number(limit) < 1:
            raise SpecError(
                field, f"%{limit_text} is not a number of tasks at once (1 or more); {fix}"
            )
        parallel = _number(limit)
    return ArrayRange(unique, min(parallel, len(unique), MAX_PARALLEL))


def index_out_of_range(index: int) -> str | None:
    """Why ``index`` can be no task's index (below 0: ``DANLU_ARRAY_INDEX`` is never
    negative; above :data:`MAX_ARRAY_INDEX`), or None when it can: the one message of a
    range's number and of a sweep body's ``index`` values
    (:func:`danlu.core.sweep.parse_sweep`)."""
    if 0 <= index <= MAX_ARRAY_INDEX:
        return None
    where = "is below 0" if index < 0 else "is too large"
    return f"index {show_number(index)} {where}: an index lies within 0..{MAX_ARRAY_INDEX:,}"


def _number(digits: str) -> int:
    """The number written in ASCII ``digits``; one beyond :data:`MAX_ARRAY_INDEX` for any
    number above it, however many digits it has (``int`` refuses more than 4,300): an index
    that large is refused, a step or a limit that large is as good as any above the range."""
    significant = digits.lstrip("0")
    if len(significant) > len(str(MAX_ARRAY_INDEX)):
        return MAX_ARRAY_INDEX + 1
    return int(significant or "0")


def array_sweep(job: dict[str, Any], array: ArrayRange) -> dict[str, Any]:
    """The sweep spec (a mapping for :func:`danlu.core.sweep.parse_sweep`) that runs the job
    spec ``job`` (without ``array``) once per index of ``array``."""
    trial = {key: value for key, value in job.items() if key not in ("name", "array")}
    return {
        "name": job.get("name", ""),
        "trial": trial,
        "parameters": {ARRAY_PARAMETER: {"values": list(array.indices)}},
        "method": "grid",
        "parallel": array.parallel,
        "array": True,
    }
