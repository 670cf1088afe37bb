"""The reconcile loop's retention pass (:class:`Purger`): what the jobs finished longer ago
than ``DANLU_RETENTION_DAYS`` left behind is deleted (:mod:`danlu.server.services.retention`
says what), the files first, outside any transaction, then the rows."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from danlu.core.errors import DanluError
from danlu.executors import Executor
from danlu.server.db import Database
from danlu.server.services import retention


class Purger:
    """Deletes, a batch at a time and for at most :data:`retention.PASS_SECONDS` a pass, at
    most every :data:`retention.EVERY` seconds while no backlog is left, what finished jobs
    left behind: the executor's records and logs, the checkpoint directory danlu made under
    ``checkpoints``, then the metric rows. A job whose files cannot be deleted yet is tried
    again :data:`retention.EVERY` seconds later, the others meanwhile. ``days`` <= 0: never."""

    def __init__(self, db: Database, executor: Executor, checkpoints: Path, days: float) -> None:
        self.db = db
        self.executor = executor
        self.checkpoints = checkpoints
        self.days = days
        self._next = 0.0
        """When the next pass is due."""
        self._retry: dict[str, float] = {}
        """Jobs whose files could not be deleted, with when to try them again."""

    def run(self, t: float) -> tuple[list[str], list[str]]:
        """One pass at ``t`` if one is due: the jobs purged, and the errors met."""
        purged: list[str] = []
        errors: list[str] = []
        if self.days <= 0 or t < self._next:
            return purged, errors
        retry = {job_id: at for job_id, at in self._retry.items() if at > t}
        with self.db.read_session() as session:
            ids = retention.due(session, self.days, t, retention.BATCH, skip=retry)
        self._next = t + (0.0 if len(ids) >= retention.BATCH else retention.EVERY)
        started = time.monotonic()
        for job_id in ids:
            if time.monotonic() - started > retention.PASS_SECONDS:
                self._next = t  # the rest in the next pass: scheduling waits meanwhile
                break
            try:
                self.executor.discard(job_id)
                own = self.checkpoints / job_id  # job ids are validated names
                if own.is_dir():
                    shutil.rmtree(own)
                with self.db.session() as session:
                    retention.purged(session, job_id, t)
            except (DanluError, OSError) as exc:
                errors.append(f"purge {job_id}: {exc}")
                retry[job_id] = t + retention.EVERY
                continue
            purged.append(job_id)
        self._retry = retry
        return purged, errors
