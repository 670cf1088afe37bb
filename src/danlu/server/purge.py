"""The reconcile loop's retention pass (:class:`Purger`): what the jobs finished longer ago
than ``DANLU_RETENTION_DAYS`` left behind is deleted (:mod:`danlu.server.services.retention`
says what), the files first, outside any transaction, then the rows; and, whatever that
setting, the rows kept for a while only (:data:`STALE_ROWS`): the API tokens revoked a month
ago and the users' token events as old (their tokens gone), the metric requests' keys a day
old."""

from __future__ import annotations

import logging
import os
import shutil
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from sqlalchemy.orm import Session

from danlu.core.errors import DanluError
from danlu.core.spec import file_url_path
from danlu.executors import Executor
from danlu.server.db import Database
from danlu.server.loops import clock_due
from danlu.server.plane_lease import EXECUTOR_STATE
from danlu.server.services import metrics, retention, users
from danlu.server.services.common import shown_time

log = logging.getLogger(__name__)

STALE_ROWS: Final[dict[str, Callable[[Session, float, int], int]]] = {
    f"API tokens revoked over {users.KEEP_REVOKED_SECONDS / retention.DAY:g} days ago": (
        users.purge_revoked_tokens
    ),
    f"users' token events over {users.KEEP_REVOKED_SECONDS / retention.DAY:g} days old whose "
    "tokens are gone": users.purge_token_events,
    "metric request keys over a day old": metrics.forget_keys,
}
"""What each :meth:`Purger.purge_stale` deletes, by the words its log line uses: each
deletes at most a batch of the rows due at a time, returning how many."""
STALE_BATCH: Final = 1_000
"""Rows of each kind :meth:`Purger.purge_stale` deletes at most a call."""


def _spellings(path: str | Path) -> set[Path]:
    """An absolute path as written (``..`` and ``//`` taken out) and with its links resolved."""
    written = os.path.normpath(os.path.abspath(path))
    try:
        return {Path(written), Path(os.path.realpath(written))}
    except (OSError, ValueError):  # a loop of links, a path the system refuses: as written
        return {Path(written)}


def local_path(checkpoint_dir: str) -> str | None:
    """The local directory a spec's ``checkpoint_dir`` names: an absolute path as written, a
    file URL's path, its scheme in any case and percent-decoded (``FILE:///...``,
    ``file:///my%20runs``, ``file://localhost/...``:
    :func:`~danlu.core.file_url.file_url_path`); None for any other URL (``s3://...``:
    nothing under the home). A ``file://`` URL naming a directory danlu made was passed over
    as any URL, and the retention deleted the checkpoints the job naming it wrote there. A
    file URL naming no directory of this machine names none: such a spec is refused at
    submission, and one stored before is launched with a directory of the job's own
    (:func:`~danlu.server.services.admission.relative_file_url`)."""
    path = file_url_path(checkpoint_dir)
    if path is None:
        path = checkpoint_dir
    return path if path.startswith("/") else None


def remove(path: Path) -> None:
    """Delete ``path``, whatever a job made of it: a directory with all it holds, or a link
    (never what it points to, which may be outside the home) or a file; nothing when absent."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


class NamedDirectories:
    """The directories under ``checkpoints`` (danlu's, one per job: ``checkpoints/JOB_ID``)
    that some job's spec names (:func:`retention.spec_paths`): as its ``checkpoint_dir``, the
    same directory, one inside it (``checkpoints/JOB_ID/run2``) or one containing it
    (``checkpoints`` itself, the home); as its ``workdir``, the same directory or one inside
    it (a user's home directory holding danlu's home, ``~/.danlu``, names none of danlu's
    directories); each path as written and with its links resolved, a ``file://`` URL as its
    path (:func:`local_path`). A job continuing another's training in the directory that one
    was given, or ran in, does so: the directory is the naming job's from then on.

    So too the executor's directories of a job under ``executor`` (the home's executor state
    next to ``checkpoints``: ``executor/work/JOB_ID``, a Slurm job's working directory when
    its spec gave none, ``executor/runs/JOB_ID``) that a spec names, the directory or one
    inside it: a job continuing where another ran without a ``workdir`` names that one's.

    Every job's spec counts, whatever its state, the purged ones included. The specs are read
    incrementally (:meth:`read`, :data:`retention.SPECS_A_PASS` jobs at most a call) and each
    path resolved when it is read; only those that name something under ``checkpoints`` or
    ``executor`` are kept."""

    def __init__(self, checkpoints: Path, executor: Path | None = None) -> None:
        self.checkpoints = checkpoints
        self.executor = checkpoints.parent / EXECUTOR_STATE if executor is None else executor
        self.read_to = 0
        """The highest ``seq`` of the jobs read."""
        self.names: dict[str, str] = {}
        """A directory's name under ``checkpoints`` -> the first spec's path naming it."""
        self.everything: str | None = None
        """The first spec's path naming ``checkpoints`` itself or a directory containing it."""
        self.executor_names: dict[str, str] = {}
        """A job id whose directory under ``executor`` (``executor/KIND/JOB_ID``) a spec names
        -> the first spec's path naming it."""

    def read(self, session: Session) -> bool:
        """Read the specs of the jobs submitted since the last call (and
        :data:`retention.REREAD` before); whether every job's is read now."""
        after = max(0, self.read_to - retention.REREAD)
        rows = retention.spec_paths(session, after, retention.SPECS_A_PASS)
        roots = _spellings(self.checkpoints)
        executor_roots = _spellings(self.executor)
        for _, checkpoint_dir, workdir in rows:
            for path, containing in ((checkpoint_dir, True), (workdir, False)):
                local = None if path is None else local_path(path)
                if local is not None:
                    self._add(local, roots, executor_roots, containing=containing)
        if rows:
            self.read_to = max(self.read_to, rows[-1][0])
        return len(rows) < retention.SPECS_A_PASS

    def _add(
        self, path: str, roots: set[Path], executor_roots: set[Path], *, containing: bool
    ) -> None:
        """Record what ``path`` names; ``containing``: a directory containing ``checkpoints``
        names every directory under it."""
        for named in _spellings(path):
            for root in roots:
                if root.is_relative_to(named):
                    if containing:
                        self.everything = self.everything or path
                elif named.is_relative_to(root):
                    self.names.setdefault(named.relative_to(root).parts[0], path)
            for root in executor_roots:
                parts = named.relative_to(root).parts if named.is_relative_to(root) else ()
                if len(parts) >= 2:  # executor/KIND/JOB_ID or inside it
                    self.executor_names.setdefault(parts[1], path)

    def naming(self, name: str) -> str | None:
        """The path of a spec that names ``checkpoints/name``, or None."""
        return self.names.get(name, self.everything)

    def naming_executor(self, job_id: str) -> str | None:
        """The path of a spec that names a directory of job ``job_id`` under ``executor``
        (or one inside it), or None."""
        return self.executor_names.get(job_id)


class Purger:
    """Deletes, a batch at a time and for at most :data:`retention.PASS_SECONDS` a pass, at
    most every :data:`retention.EVERY` seconds while no backlog is left, what finished jobs
    left behind: the checkpoint directory danlu made under ``checkpoints`` (unless a job's
    spec names it: :class:`NamedDirectories`), the executor's records, logs and directories
    (unless a job's spec names one of those directories), then the metric rows. That order
    leaves a job whose directory cannot be deleted whole, its log still there; it is tried
    again :data:`retention.EVERY` seconds later, the others meanwhile. ``days`` <= 0:
    never."""

    def __init__(self, db: Database, executor: Executor, checkpoints: Path, days: float) -> None:
        self.db = db
        self.executor = executor
        self.checkpoints = checkpoints
        self.days = days
        self.named = NamedDirectories(checkpoints)
        """The directories under ``checkpoints`` that jobs' specs name: they stay."""
        self._next = 0.0
        """When the next pass is due."""
        self._retry: dict[str, float] = {}
        """Jobs whose files could not be deleted, with when to try them again."""
        self._next_stale = 0.0
        """When the next :meth:`purge_stale` is due."""

    def run(
        self, t: float, purged: list[str] | None = None, errors: list[str] | None = None
    ) -> tuple[list[str], list[str]]:
        """One pass at ``t`` if one is due: the jobs purged, and the errors met. The revoked
        tokens and the old request keys go first, whatever ``days`` (:meth:`purge_stale`).

        ``purged`` and ``errors``: the lists the pass adds to as it goes (new ones when
        None), and returns. A database error ends the pass (it propagates); what the pass
        met before it is in them then, for the caller to report: the errors of the
        deletions that failed before were lost with the lists the pass returned."""
        purged = [] if purged is None else purged
        errors = [] if errors is None else errors
        self.purge_stale(t)
        if self.days <= 0 or not clock_due(self._next, t, retention.EVERY):
            return purged, errors
        retry = {
            job_id: at
            for job_id, at in self._retry.items()
            if not clock_due(at, t, retention.EVERY)
        }
        with self.db.read_session() as session:
            ids = retention.due(session, self.days, t, retention.BATCH, skip=retry)
            read_all = not ids or self.named.read(session)
        if not read_all:  # a spec not read yet may name a directory due: none goes before
            self._next = t
            return purged, errors
        self._next = t + (0.0 if len(ids) >= retention.BATCH else retention.EVERY)
        started = time.monotonic()
        done: list[str] = []
        removed = retention.Removed()
        try:
            for job_id in ids:
                if time.monotonic() - started > retention.PASS_SECONDS:
                    self._next = t  # the rest in the next pass: scheduling waits meanwhile
                    break
                try:
                    self._delete_files(job_id)
                    with self.db.session() as session:
                        rows = retention.purged(session, job_id, t)
                except (DanluError, OSError) as exc:
                    errors.append(f"purge {job_id}: {exc}")
                    retry[job_id] = t + retention.EVERY
                    continue
                purged.append(job_id)
                done.append(job_id)
                removed += rows
        finally:  # a database error ends the pass: the delays met before it still hold
            self._retry = retry
            if done:
                self._said(done, removed, t)
        return purged, errors

    def _said(self, done: list[str], removed: retention.Removed, t: float) -> None:
        """Log, once a pass, what the pass at ``t`` purged (``done``: the jobs) and the
        cutoff it purged by: the purge deleted files and rows with no word in the log."""
        when = shown_time(retention.cutoff(self.days, t))
        shown = ", ".join(done[:5]) + (f" and {len(done) - 5} more" if len(done) > 5 else "")
        log.info(
            "retention: purged %d job(s) that finished before %s (DANLU_RETENTION_DAYS=%g): "
            "%s; deleted %d metric record(s), %d metric request key(s) and the files danlu "
            "kept of them (checkpoint directories, logs, run records; those a job's spec "
            "names stay); the jobs and their events stay",
            len(done),
            when,
            self.days,
            shown,
            removed.metric_records,
            removed.metric_keys,
        )

    def purge_stale(self, t: float) -> dict[str, int]:
        """Delete what :data:`STALE_ROWS` says is due at ``t``, a batch of each at a time, at
        most every :data:`retention.EVERY` seconds once no backlog is left (one token a job
        run, revoked when it ends, and a key a metrics request must not pile up); how many
        of each (nothing when no pass is due)."""
        if not clock_due(self._next_stale, t, retention.EVERY):
            return {}
        batch = STALE_BATCH
        with self.db.session() as session:
            deleted = {what: purge(session, t, batch) for what, purge in STALE_ROWS.items()}
        backlog = any(count >= batch for count in deleted.values())
        self._next_stale = t + (0.0 if backlog else retention.EVERY)
        for what, count in deleted.items():
            if count:
                log.info("retention: deleted %d %s", count, what)
        return deleted

    def _delete_files(self, job_id: str) -> None:
        """The job's own checkpoint directory (unless a spec names it), then what the
        executor keeps of it, its log last (unless a spec names the executor's directory of
        the job: the executor deletes its records, log and directories together)."""
        own = self.checkpoints / job_id  # job ids are validated names
        naming = self.named.naming(job_id)
        if naming is None:
            remove(own)
        elif os.path.lexists(own):
            log.info(
                "retention: left %s (job %s's checkpoint directory): a job's spec names %s "
                "as its checkpoint_dir or workdir, so it is that job's",
                own,
                job_id,
                naming,
            )
        naming = self.named.naming_executor(job_id)
        if naming is None:
            self.executor.discard(job_id)
        else:
            log.info(
                "retention: left what the executor keeps of job %s (its records, log and "
                "directories under %s): a job's spec names %s as its checkpoint_dir or "
                "workdir, so it is that job's",
                job_id,
                self.named.executor,
                naming,
            )
