"""Failures that repeat: logging one that may repeat every reconcile pass (a full disk, a
database down, a policy that raises on the cluster's state) without a traceback every two
seconds (:class:`RepeatedFailure`), and judging a job whose runs keep exiting 75 on their
own without progress (:func:`judge_unasked_exit_75`), which would otherwise be re-queued
for free forever."""

from __future__ import annotations

import logging
import re
import time

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from danlu.server.db.models import Job, JobEvent, JobMetric

REPEAT_LOG_SECONDS = 60.0
"""While a failure repeats the same way, one line counts the repeats at most this often."""


_VARYING = re.compile(r"\b(?=[0-9a-f]*[0-9])[0-9a-f]{6,}\b|[0-9]+(?:\.[0-9]+)?")
"""What a failure's message may name that changes from one pass to the next: ids (hex with a
digit, 6 or more characters: a job's), counts, times, sizes."""


def failure_kind(what: str) -> str:
    """What makes two failures the same: their one-line summaries (``Type: message``) with
    the ids and numbers in them masked (:data:`_VARYING`)."""
    return _VARYING.sub("#", what)


class RepeatedFailure:
    """One kind of failure of a loop: :meth:`failed` logs it in full (with its traceback) the
    first time and when it changes (another type, or another message but for the ids and
    numbers in it: :func:`failure_kind`), then one line counting the repeats, with the
    latest message, at most every ``quiet_s`` seconds; :meth:`worked` logs once that it
    stopped."""

    def __init__(
        self, logger: logging.Logger, label: str, recovered: str, quiet_s: float | None = None
    ) -> None:
        self.logger = logger
        self.label = label
        """What failed, as the lines name it (``"reconcile pass"``)."""
        self.recovered = recovered
        """The line logged when it works again (``"reconcile passes work again"``)."""
        self.quiet_s = REPEAT_LOG_SECONDS if quiet_s is None else quiet_s
        self.failing = ""
        """The last failure's one-line summary; empty while things work."""
        self._kind = ""
        self._repeats = 0
        self._quiet_until = 0.0

    def failed(self, exc: BaseException) -> str:
        """Note that ``exc`` was raised (call it in the ``except`` block); its summary."""
        what = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        now = time.monotonic()
        kind = failure_kind(what)
        if not self.failing or kind != self._kind:
            self.logger.error("%s failed", self.label, exc_info=exc)
            self._repeats, self._quiet_until = 0, now + self.quiet_s
        else:
            self._repeats += 1
            if now >= self._quiet_until:
                self.logger.warning("%s failed %d more times: %s", self.label, self._repeats, what)
                self._repeats, self._quiet_until = 0, now + self.quiet_s
        self.failing, self._kind = what, kind
        return what

    def worked(self) -> None:
        """Note a success: logs once after failures, then forgets them."""
        if self.failing:
            self.logger.warning("%s (after: %s)", self.recovered, self.failing)
        self.failing, self._kind, self._repeats = "", "", 0


UNASKED_75 = "checkpointed and exited 75 on its own"
"""How the reason of every exit 75 that danlu did not ask for begins (free or counted): the
next one is judged against the latest of them."""
MIN_PROGRESS_SECONDS = 300.0
"""For a job that never reported a step: a run that lasted this long made progress."""
_STEP_MARK = re.compile(r"last step reported: (\d+)")
_CHECKPOINT_MARK = re.compile(r"checkpoint step: (\d+)")


def judge_unasked_exit_75(session: Session, job: Job, ran_for: float) -> tuple[bool, str]:
    """Judge a run of ``job`` (RUNNING, no cancellation asked) that exited 75 with no stop
    asked by danlu (a SIGTERM from outside, or the job's own doing), ``ran_for`` seconds
    after it started. Returns (counted, reason): counted is True when the exit is a failure
    (a restart, with backoff; FAILED out of restarts) rather than a free re-queue.

    It is free the first time (a host shutdown) and when the job made progress since the
    previous such exit, whose reason records the marks to beat: this run's highest reported
    step (the run is the job's current attempt, :func:`run_highest_step`) is above the step
    recorded there, or the job's ``checkpoint_step`` is above the checkpoint recorded there
    (or none was); for a run that reported no step and saved no later checkpoint, it lasted
    :data:`MIN_PROGRESS_SECONDS`. Only this run's steps count, not the job's all-time
    highest (``last_step``), which spoke for runs that reported nothing. A run that resumed
    from an earlier checkpoint (a rollback) and advanced is free when it saved a checkpoint
    past the previous one; one that redid the same steps without saving counts, so a job
    that exits 75 every time, at once or after steps it never keeps, ends FAILED. The
    reason records this run's highest step and the checkpoint step for the next."""
    highest = run_highest_step(session, job.id, job.attempt)
    checkpoint = job.checkpoint_step
    mark = "no step reported" if highest is None else f"last step reported: {highest}"
    if checkpoint is not None:
        mark += f"; checkpoint step: {checkpoint}"
    query = (
        select(JobEvent.reason)
        .where(JobEvent.job_id == job.id, JobEvent.reason.startswith(UNASKED_75, autoescape=True))
        .order_by(JobEvent.id.desc())
        .limit(1)
    )
    previous = session.scalar(query)
    if previous is None:
        progress = True
    else:
        step_before = _STEP_MARK.search(previous)
        checkpoint_before = _CHECKPOINT_MARK.search(previous)
        checkpointed = checkpoint is not None and (
            checkpoint_before is None or checkpoint > int(checkpoint_before.group(1))
        )
        if highest is None:
            progress = checkpointed or ran_for >= MIN_PROGRESS_SECONDS
        else:
            stepped = step_before is None or highest > int(step_before.group(1))
            progress = stepped or checkpointed
    if progress:
        return False, f"{UNASKED_75} (a SIGTERM from outside); {mark}"
    return True, (
        f"{UNASKED_75} again without progress since its previous exit 75 ({mark}; ran "
        f"{ran_for:.0f}s): counted as a failure"
    )


def run_highest_step(session: Session, job_id: str, attempt: int) -> int | None:
    """The highest step the run ``attempt`` of ``job_id`` reported in its metric records
    (``job_metrics.attempt``; an index seek); None when it reported none."""
    where = (JobMetric.job_id == job_id, JobMetric.attempt == attempt)
    highest: int | None = session.scalar(select(func.max(JobMetric.step)).where(*where))
    return highest
