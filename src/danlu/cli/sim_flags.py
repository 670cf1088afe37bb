"""``danlu sim``'s flags that name the workload's projects and users (``--project-share``,
``--quota``, ``--user-quota``), its policy list (``--policies``), ``--option`` pairs and
``sim pack --seeds``: parsed, and checked against what they name, as clear errors
(:class:`ConfigError`, exit 2) naming the flag."""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from danlu.config import parse_option_pairs
from danlu.core.errors import ConfigError
from danlu.core.values import plain_float
from danlu.sched.quota import Quota, Quotas
from danlu.sim.config import SimConfig
from danlu.sim.workload_jobs import Workload

MOST_NAMES_SHOWN = 20
"""An error lists at most this many of the workload's names (and says how many it has)."""


def _named_numbers(
    pairs: list[str], flag: str, form: str, example: str, zero: bool
) -> dict[str, float]:
    """``flag NAME=NUMBER`` pairs: a finite number for each name, above 0 (or from 0 with
    ``zero``), each name once (given twice, which value was meant is unknown; the last
    silently won); ``form`` (``NAME=WEIGHT``) and ``example`` show the fix in the error.
    The number follows the last ``=``: a name may hold one (``x=y=1`` is ``x=y``'s). It is
    written plainly (ASCII, no ``_``: ``vision=1_6`` was 16 GPUs)."""
    out: dict[str, float] = {}
    for pair in pairs:
        name, sep, text = pair.rpartition("=")
        try:
            value = plain_float(text) if sep and name else math.nan
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and (value >= 0 if zero else value > 0)):
            bound = ">= 0" if zero else "above 0"
            raise ConfigError(
                f"{flag} {pair!r} must look like {form} with a number {bound}, e.g. {example}"
            )
        if name in out:
            raise ConfigError(
                f"{flag} names {name!r} more than once ({name}={out[name]:g} and {pair}); "
                f"give each name once"
            )
        out[name] = value
    return out


def parse_project_shares(pairs: list[str]) -> dict[str, float]:
    """``--project-share NAME=WEIGHT`` pairs: each project's weight (above 0)."""
    return _named_numbers(pairs, "--project-share", "NAME=WEIGHT", "research=2", zero=False)


def parse_quotas(projects: list[str], users: list[str]) -> Quotas:
    """``--quota PROJECT=GPUS`` and ``--user-quota USER=GPUS`` pairs: the GPUs each
    project's (user's) running jobs may hold at once (a share of a GPU counts its part)."""
    by_project = _named_numbers(projects, "--quota", "PROJECT=GPUS", "vision=16", zero=True)
    by_user = _named_numbers(users, "--user-quota", "USER=GPUS", "ana=8", zero=True)
    return Quotas(
        {name: Quota(f"project {name!r}", gpus) for name, gpus in by_project.items()},
        {name: Quota(f"user {name!r}", gpus) for name, gpus in by_user.items()},
    )


def _listing(names: set[str]) -> str:
    shown = sorted(names)[:MOST_NAMES_SHOWN]
    more = f", ... ({len(names)} in all)" if len(names) > len(shown) else ""
    return ", ".join(shown) + more


def check_named(workload: Workload, config: SimConfig) -> None:
    """Refuse a ``--project-share``, ``--quota`` or ``--user-quota`` that names a project
    (user) no job of ``workload`` has: it would change nothing, most likely a typo. The
    error names the flag, the name and the workload's projects (users)."""
    projects = {job.request.project for job in workload.jobs}
    users = {job.request.user for job in workload.jobs} - {""}
    checks: tuple[tuple[str, str, Iterable[str], set[str]], ...] = (
        ("--project-share", "project", config.project_shares, projects),
        ("--quota", "project", config.quotas.projects, projects),
        ("--user-quota", "user", config.quotas.users, users),
    )
    for flag, kind, named, known in checks:
        for name in named:
            if name in known:
                continue
            if known:
                has = f"its {kind}s: {_listing(known)}"
            else:
                has = f"it has no {kind}s (its {kind} column is absent or empty)"
            raise ConfigError(
                f"{flag}: no job of workload {workload.name!r} has {kind} {name!r}; {has}"
            )


def check_choice(flag: str, kind: str, name: str, valid: Iterable[str]) -> None:
    """Refuse ``name`` unless it is one of ``valid``, naming the flag, the closest valid
    name where one is near (``--policy tiresas``: did you mean tiresias?) and all of them."""
    known = list(valid)
    if name in known:
        return
    near = [k for k in known if k.lower() == name.lower()]  # FIFO: no close match as cased
    near = near or difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    hint = f"did you mean {near[0]}? " if near else ""
    raise ConfigError(f"{flag}: unknown {kind} {name!r}; {hint}valid: {', '.join(known)}")


def parse_policy_list(text: str, valid: Iterable[str]) -> list[str]:
    """``--policies fifo,sjf``: the names, each a policy of ``valid``, each once (a policy
    named twice would be shown twice in the table but once in the JSON)."""
    known = list(valid)
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ConfigError(
            f"--policies is empty; name policies, e.g. fifo,sjf (valid: {', '.join(known)})"
        )
    seen: set[str] = set()
    for name in names:
        check_choice("--policies", "policy", name, known)
        if name in seen:
            raise ConfigError(f"--policies: {name!r} is named twice; name each policy once")
        seen.add(name)
    return names


def json_text(payload: Mapping[str, Any]) -> str:
    """``payload`` as strict JSON (indented): a NaN or an infinity left in it is a bug, an
    error here rather than a file other tools cannot read."""
    return json.dumps(payload, indent=1, allow_nan=False)


MAX_SEEDS = 10_000
"""The most seeds ``--seeds`` may name (each is a whole packing run); a range of billions
used to be built in memory before anything else (a MemoryError)."""


_SEED_PART = re.compile(r"\s*\+?([0-9]+)\s*(?:-\s*\+?([0-9]+)\s*)?")
"""A part of ``--seeds``: a seed or a range of them (``42``, ``42-51``), written with the
digits 0-9."""


def parse_seeds(text: str) -> list[int]:
    """``42-51`` or ``1,2,3`` (or a mix: ``1,5-7``) -> list of ints, at most
    :data:`MAX_SEEDS` of them (counted before the list is built). A seed is a whole number
    of 0 or more in the digits 0-9: ``1_0`` (read as 10) and other scripts' digits were
    taken, and a negative seed was called no seed list without saying why."""
    spans: list[tuple[int, int]] = []
    for part in text.split(","):
        if not part.strip():
            continue
        match = _SEED_PART.fullmatch(part)
        if match is None:
            if part.strip().startswith("-"):
                raise ConfigError(
                    f"--seeds {text!r}: {part.strip()} is negative; seeds are whole numbers "
                    "of 0 or more, e.g. 42-51"
                )
            raise ConfigError(
                f"--seeds {text!r} is not a seed list; write e.g. 42-51 or 1,2,3 (whole "
                "numbers of 0 or more, in the digits 0-9)"
            )
        lo, hi = match.groups()
        spans.append((int(lo), int(hi if hi is not None else lo)))
        if spans[-1][1] < spans[-1][0]:
            raise ConfigError(
                f"--seeds {text!r}: the range {part.strip()} counts down; write {hi}-{lo}"
            )
    if not spans:
        raise ConfigError("--seeds is empty; write e.g. 42-51")
    total = sum(hi - lo + 1 for lo, hi in spans)
    if total > MAX_SEEDS:
        raise ConfigError(
            f"--seeds {text!r} names {total:,} seeds, more than {MAX_SEEDS:,} seeds at once; "
            "name fewer, e.g. 42-51"
        )
    return [seed for lo, hi in spans for seed in range(lo, hi + 1)]


def parse_options(pairs: list[str]) -> dict[str, Any]:
    """``--option key=value`` policy options (:func:`danlu.config.parse_option_pairs`), each
    option once, as ``--quota`` and ``--project-share`` take each name once: given twice
    (``--option fgd_weight=1 --option fgd-weight=2``, ``-`` read as ``_``), the last
    silently won."""
    options: dict[str, Any] = {}
    given: dict[str, str] = {}
    for pair in pairs:
        ((name, value),) = parse_option_pairs([pair], "--option").items()
        if name in given:
            raise ConfigError(
                f"--option names {name!r} more than once ({given[name]} and {pair}); "
                "give each option once"
            )
        given[name] = pair
        options[name] = value
    return options
