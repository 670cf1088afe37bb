"""The quota options of ``danlu user set`` and ``danlu project add / set`` (``--quota-gpus``,
``--quota-memory``), read as a number, as ``none`` (no quota), or as not given; an empty or
malformed value is an error naming the option (exit 2)."""

from __future__ import annotations

import math
from typing import Any

from danlu.cli import jobs as common
from danlu.core.errors import SpecError
from danlu.core.values import plain_float

NONE_VALUES = ("none", "unlimited", "")
"""What a quota given as ``none`` may be written as (no quota); ``--os-user`` reads them as
the OS account named like the user."""


def quota_value(value: str | None, option: str, parse: Any) -> Any:
    """``None`` for an option not given; ``"none"`` for one given as ``none`` (no quota);
    else the parsed value (a :class:`SpecError` naming the option becomes exit 2). An empty
    value is refused: it removed the quota, so a script's unset variable (``--quota-gpus
    "$GPUS"``) lifted a project's or user's limit without a word."""
    if value is None:
        return None
    if not value.strip():
        raise common.fail(
            SpecError(
                option,
                "is empty: give a number (e.g. 8 or 640GiB), or 'none' to remove the quota",
            )
        )
    if value.strip().lower() in NONE_VALUES:
        return "none"
    try:
        return parse(value.strip())
    except SpecError as exc:  # it names the option itself (parse_bytes): not twice
        raise common.fail(exc if exc.field == option else f"{option}: {exc}") from None
    except ValueError as exc:
        raise common.fail(f"{option}: {exc}") from None


def gpu_quota(value: str) -> float:
    """``--quota-gpus``: a number of GPUs, 0 or more (a share of one GPU counts its part),
    written plainly (:func:`~danlu.core.values.plain_float`): ``float`` also read ``1_6``
    as 16 and other scripts' digits, so a typo set another quota without a word."""
    try:
        gpus = plain_float(value)
    except ValueError:  # float's own message ("could not convert string...") says no fix
        gpus = math.nan
    if not gpus >= 0 or gpus == math.inf:
        raise ValueError(f"give a number of GPUs >= 0 (e.g. 8 or 0.5) or 'none', not {value!r}")
    return gpus
