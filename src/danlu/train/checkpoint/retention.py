"""Which checkpoints retention keeps: a pure decision over the manifests, for
:meth:`~danlu.train.checkpoint.manager.CheckpointManager._retain` (which removes the rest)."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from danlu.train.checkpoint.fields import CheckpointInfo, finite_metric


def kept_names(
    infos: Sequence[CheckpointInfo],
    committed: str,
    *,
    skipped: Collection[str],
    keep_last: int,
    keep_best: int,
    best_metric: str | None,
    mode: str,
    next_base: str | None,
) -> set[str]:
    """The names retention keeps of the checkpoints ``infos`` after ``committed`` was
    written: ``committed`` itself; of those not ``skipped`` (found invalid, or unreadable in
    the manager's mode), the newest ``keep_last`` by commit order (the manifest's
    ``created_ns``, not the step: a run may write lower steps than an older run left in the
    directory, or go on after a fallback past a newer checkpoint) and the best ``keep_best``
    by a finite ``best_metric`` of each run (the largest first when ``mode`` is
    ``"max"``, else the smallest) (the manifest's ``run``; those written before
    runs were recorded count as one: an older run's better metric took the new run's
    places, and its own best went); the bases of the kept incremental checkpoints, and
    ``next_base``, the base of the next one.

    Two checkpoints of one run's step (a periodic one, then a ``save()`` of the same step
    with an evaluation's metric, as ``fit``'s end of an epoch makes) take one of
    ``keep_last``'s places, the newer's (it holds what the script did after the first: the
    metric, ``extra``): before, they took two, and ``keep_last=2`` kept a single step."""
    valid = [i for i in infos if i.name not in skipped]
    by_commit = sorted(valid, key=lambda i: (i.created_ns, i.step, i.name))
    newest = {(i.run, i.step): i for i in by_commit}  # the last committed of each step wins
    recent = [i for i in by_commit if newest[(i.run, i.step)] is i]
    keep = {committed} | {i.name for i in recent[-keep_last:]}
    if best_metric is not None and keep_best > 0:
        scored = [(v, i) for i in valid if (v := finite_metric(i, best_metric)) is not None]
        scored.sort(key=lambda vi: vi[0], reverse=mode == "max")
        for run in {i.run for _, i in scored}:  # the best K of each run
            keep |= {i.name for _, i in [vi for vi in scored if vi[1].run == run][:keep_best]}
    by_name = {i.name: i for i in infos}
    keep |= {base for n in list(keep) if n in by_name and (base := by_name[n].base) is not None}
    if next_base is not None:
        keep.add(next_base)
    return keep
