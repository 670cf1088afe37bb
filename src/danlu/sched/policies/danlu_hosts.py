"""Where the running jobs of each model family sit, kept across rounds for the sharing rule.

:func:`~danlu.sched.policies.danlu_share.place_shared` closes to a shared request the GPUs
beside jobs it is predicted to lose with, so each round it needs, per family, the GPUs that
family's running jobs hold. Built afresh, that is a pass over every running job's shares
every round (7,600 jobs in the at-scale benchmark when every request asks for part of a
GPU). :class:`FamilyHosts` keeps, per family and GPU, how many running jobs of the family
hold a share there, and updates the counts from the jobs that started or stopped since the
last round. Running jobs are matched by their status objects (adapters keep the objects of
unchanged jobs, as the policy's other caches rely on), so a round costs in proportion to
the jobs that changed.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from danlu.core.cluster import Allocation, Cluster
from danlu.sched.view import JobStatus

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def gpu_indices(alloc: Allocation, cluster: Cluster) -> IntArray:
    """The flat GPU indices of ``alloc``'s shares."""
    return np.fromiter(
        (cluster.gpu_offset(share.node) + share.gpu for share in alloc.shares),
        np.int64,
        len(alloc.shares),
    )


class FamilyHosts:
    """Per model family, how many running jobs hold a share of each GPU (see the module
    docstring). One object serves one policy over its rounds; a view of another cluster
    starts it afresh."""

    def __init__(self) -> None:
        self._cluster: Cluster | None = None
        self._codes: dict[str, int] = {}
        """Family -> its row of :attr:`_counts`."""
        self._counts: npt.NDArray[np.int32] = np.zeros((0, 0), dtype=np.int32)
        self._held: dict[int, tuple[JobStatus, int, IntArray]] = {}
        """``id(status)`` -> (the status, its family's row, its GPUs), for every running job
        counted; the status is kept so that its ``id`` is not reused while it is here."""

    def _row(self, family: str, counts: npt.NDArray[np.int32]) -> tuple[int, npt.NDArray[np.int32]]:
        """``family``'s row in ``counts`` (a new one, and ``counts`` grown, when new)."""
        code = self._codes.get(family)
        if code is None:
            code = self._codes[family] = len(self._codes)
        if code >= counts.shape[0]:
            counts = np.vstack([counts, np.zeros((1, counts.shape[1]), dtype=np.int32)])
        return code, counts

    def update(self, cluster: Cluster, running: Iterable[JobStatus]) -> None:
        """Count ``running`` (every running job of the round's view) instead of last round's
        jobs: the jobs no longer there are taken off, the new ones added."""
        if cluster is not self._cluster:
            self._cluster = cluster
            self._codes = {}
            self._counts = np.zeros((0, cluster.total_gpus), dtype=np.int32)
            self._held = {}
        jobs = tuple(running)
        current = dict(zip(map(id, jobs), jobs, strict=True))
        held, counts = self._held, self._counts
        for key in held.keys() - current.keys():
            _, code, where = held.pop(key)
            np.subtract.at(counts[code], where, 1)
        for key in current.keys() - held.keys():
            job = current[key]
            code, counts = self._row(job.request.family, counts)
            where = gpu_indices(job.allocation, cluster)
            np.add.at(counts[code], where, 1)
            held[key] = (job, code, where)
        self._counts = counts

    def masks(
        self, leaving: Iterable[JobStatus], placed: Iterable[tuple[str, Allocation]]
    ) -> dict[str, BoolArray]:
        """Per family, the GPUs its jobs hold once the round's plan is carried out: the
        counted jobs but ``leaving`` (running jobs the plan preempts or moves), plus
        ``placed`` ((family, allocation) of the jobs the plan starts or moves). Families
        with no job left are not keys."""
        assert self._cluster is not None, "update() first"
        counts = self._counts.copy()
        for job in leaving:
            entry = self._held.get(id(job))
            if entry is not None:
                np.subtract.at(counts[entry[1]], entry[2], 1)
        for family, alloc in placed:
            code, counts = self._row(family, counts)
            np.add.at(counts[code], gpu_indices(alloc, self._cluster), 1)
        if counts.shape[0] > self._counts.shape[0]:  # keep the rows of new families
            grown = np.zeros(counts.shape, dtype=np.int32)
            grown[: self._counts.shape[0]] = self._counts
            self._counts = grown
        present = counts > 0
        return {
            family: present[code]
            for family, code in self._codes.items()
            if code < present.shape[0] and present[code].any()
        }
