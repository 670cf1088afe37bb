"""What a run's metric records say of its checkpoints: ``checkpoint_step``.

The server keeps the largest ``checkpoint_step`` a job's records carried as the Job's last
checkpoint (how much work a preemption or a crash loses; shown to users), so a record says a
checkpoint only once the writer committed it (its manifest written: it is complete and
loads), never before: a save that fails, or a process killed while it writes, leaves no
record saying a checkpoint that does not exist. Each checkpoint is said once by a process:

- by the first step record taken after its commit (a step's record is taken before its
  checkpoint, so a synchronous periodic one is said by the next step's record; an
  asynchronous one by the first record after its write finished);
- one committed after the run's last record (the periodic checkpoint of the last step, a
  final ``ctx.save()``, a preemption's, an asynchronous write still going at the end) by a
  record of its own, :meth:`CheckpointNews.closing_record`, which the context reports at
  close once the writer has finished, before the reporter's last flush;
- before this process committed any, the checkpoint a resumed run started from (its writer
  may have died before a record said it).

Only the chief reports records; it is also the rank that writes (and commits) checkpoints.
"""

from __future__ import annotations

import time
from typing import Any

from danlu.train.ckpt import Checkpoints


class CheckpointNews:
    """Tells which committed checkpoint the records have not said yet."""

    def __init__(self, checkpoints: Checkpoints) -> None:
        self.checkpoints = checkpoints
        self.resumed_from: int | None = None
        """The step of the checkpoint this process resumed from (None: a fresh start)."""
        self.said: int | None = None
        """The checkpoint step the last record saying one (``checkpoint_step``) said."""

    def take(self) -> int | None:
        """The ``checkpoint_step`` for the record taken now (and marked as said), or None
        when there is nothing new to say: the step of the checkpoint the writer committed
        last, else, before it committed any, the one the run resumed from."""
        committed = self.checkpoints.committed_step
        news = self.resumed_from if committed is None else committed
        if news is None or news == self.said:
            return None
        self.said = news
        return news

    def closing_record(self, step: int) -> dict[str, Any] | None:
        """The record that says a checkpoint committed after the run's last record, or None
        when every committed checkpoint was said. Call it once the writer has finished
        (:meth:`Checkpoints.wait`). It carries the run's current ``step`` (whose own record,
        when there is one, came before), its ``time`` and ``checkpoint_step``: no training
        values, so that nothing reading a run's losses or measurements takes it for a
        step."""
        news = self.take()
        if news is None:
            return None
        return {"step": step, "time": time.time(), "checkpoint_step": news}
