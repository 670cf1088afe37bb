"""Which run a restart resumes, and the time order that decides it, for
:meth:`~danlu.train.checkpoint.manager.CheckpointManager.load_latest`.

A checkpoint whose manifest is torn or missing (its process died in the commit) has no
``created_ns``; its ``meta.json``, a save's first file, names its ``run`` and when the save
started (``started_ns``). Both times come from :func:`next_time_ns`: the wall clock's, but
past every time already in the directory, so that they order every checkpoint there, torn or
complete, even when the nodes' clocks disagree.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from danlu.train.checkpoint.fields import CheckpointInfo


@dataclass(frozen=True)
class TornCheckpoint:
    """A checkpoint of danlu's naming whose manifest is damaged (torn, malformed, missing):
    the ``run`` and ``started_ns`` its ``meta.json`` names, None where it names none (an
    earlier version's, a sharded one written before it had a ``meta.json``, or one that
    cannot be read)."""

    name: str
    run: str | None
    started_ns: int | None


def torn_checkpoint(name: str, meta: bytes | None) -> TornCheckpoint:
    """The :class:`TornCheckpoint` ``name`` whose ``meta.json`` holds ``meta`` (None: it could
    not be read), unverified: what it does not name well is None."""
    try:
        parsed = json.loads(meta) if meta is not None else None
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        return TornCheckpoint(name, None, None)
    run, started = parsed.get("run"), parsed.get("started_ns")
    return TornCheckpoint(
        name,
        run if isinstance(run, str) and run else None,
        started if isinstance(started, int) and not isinstance(started, bool) else None,
    )


def next_time_ns(infos: Iterable[CheckpointInfo], torn: Iterable[TornCheckpoint], now: int) -> int:
    """A new save's ``started_ns`` or commit's ``created_ns``: ``now`` (the wall clock's), but
    at least one past every checkpoint's in the directory (``infos``' ``created_ns``,
    ``torn``'s ``started_ns``). A node whose clock is behind the one that wrote them (or a
    clock stepped back) still orders its checkpoints after theirs."""
    times = [i.created_ns for i in infos] + [t.started_ns for t in torn if t.started_ns]
    return max(now, max(times, default=0) + 1)


def resuming_runs(torn: Sequence[TornCheckpoint], newest: CheckpointInfo | None) -> set[str | None]:
    """The run a restart resumes within: that of the newest checkpoint in the directory,
    torn (``torn``, by ``started_ns``) or complete (``newest``, the newest by commit order
    of those the manager reads; None: none). A torn checkpoint that records no start (an
    earlier version's) is newer than every complete one (each commit's retention removes
    the torn ones) but older than one that records it. Empty when nothing names a run.

    Before, every torn checkpoint's run resumed (a run started afresh over a directory whose
    older run had died in a commit, and then died in its own first commit, resumed the older
    run's weights), and a torn checkpoint was newer than a complete one committed after it
    (one whose process died before its retention removed the torn one)."""
    timed = [t for t in torn if t.run is not None and t.started_ns is not None]
    if timed:
        last = max(t.started_ns or 0 for t in timed)
        if newest is None or last > newest.created_ns:
            return {t.run for t in timed if t.started_ns == last}
    else:
        untimed: set[str | None] = {t.run for t in torn if t.run is not None}
        if untimed:
            return untimed
    return set() if newest is None else {newest.run}


def of_runs(
    infos: Sequence[CheckpointInfo], runs: set[str | None]
) -> tuple[list[CheckpointInfo], list[CheckpointInfo]]:
    """``(mine, others)``: ``infos`` (in their order) that are of ``runs`` and those of other
    runs. A checkpoint written before runs were recorded (``run`` None) is of any run, and
    when ``runs`` holds None (the newest is such a checkpoint) every checkpoint is, as
    before runs were recorded."""
    if None in runs:
        return list(infos), []
    mine = [i for i in infos if i.run is None or i.run in runs]
    return mine, [i for i in infos if not (i.run is None or i.run in runs)]
