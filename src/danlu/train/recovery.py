"""What a run does when it cannot go on as it is: anomaly recovery and preemption.

:class:`Recovery` is a part of :class:`~danlu.train.context.TrainContext` (its base class):

- *anomaly recovery*: the ``"rollback"`` action, and parameters a NaN/Inf gradient reached
  (on a step whose norm was not checked, or applied by ``"warn"``), go back to the last
  checkpoint **of this run**: one it wrote, or the one it resumed from. A run started with
  ``resume=False`` in a directory holding an older run's checkpoints never loads those: they
  are another run's state (other weights, another data position), not this one's past;
- *preemption*: SIGTERM -> checkpoint at the step boundary -> exit 75 (the log line naming
  why: :meth:`~danlu.train.preempt.Preemption.said`), never checkpointing
  parameters that hold NaN/Inf (the restart would resume from them and fail at once, on
  every restart): the restart resumes from the last good checkpoint instead. Nor does any
  other checkpoint with anomaly detection on: the periodic one recovers by the action, a
  ``ctx.save()`` (``fit``'s at an epoch's end) is left out (:meth:`_nonfinite_to_save`).
"""

from __future__ import annotations

import logging
import math

import torch

from danlu.train.anomaly import AnomalyDetector, TrainingAnomalyError
from danlu.train.batch import BatchController
from danlu.train.ckpt import Checkpoints
from danlu.train.lr import LRController
from danlu.train.preempt import Preemption
from danlu.train.step import StepEngine

log = logging.getLogger("danlu.train")


class Recovery:
    """The recovery part of :class:`~danlu.train.context.TrainContext` (see the module
    docstring); the context sets the attributes below and defines the three methods."""

    model: torch.nn.Module
    anomaly: AnomalyDetector | None
    engine: StepEngine
    batch: BatchController
    lr: LRController
    checkpoints: Checkpoints
    preemption: Preemption
    step_num: int
    rollbacks: int
    _rolled_back_for: set[int]
    _recovered_for: set[int]
    _saved_step: int | None

    def save(self, metrics: dict[str, float] | None = None) -> None:
        raise NotImplementedError  # TrainContext.save

    def restore(self) -> bool:
        raise NotImplementedError  # TrainContext.restore

    def close(self) -> None:
        raise NotImplementedError  # TrainContext.close

    def _parameters_nonfinite(self) -> bool:
        """Whether a parameter holds NaN/Inf. Checked (one read of the parameters) only
        after a non-finite loss with the "skip" action, which cannot mend parameters that
        are already bad, before a periodic checkpoint and before a preemption's."""
        with torch.no_grad():
            return not all(bool(torch.isfinite(p).all()) for p in self.model.parameters())

    def _poisoned(self) -> bool:
        """With anomaly detection on, whether the parameters hold NaN/Inf, read only when a
        gradient reached them unchecked (off the norm's cadence) or was applied although
        found anomalous ("warn") since they were last found finite
        (:attr:`StepEngine.unchecked_update`, cleared only by a read that finds them
        finite: a "warn" run whose periodic checkpoint was left out for them is read again
        at a ``save()`` of the same step, which wrote them before)."""
        if self.anomaly is None or not self.engine.unchecked_update:
            return False
        if self._parameters_nonfinite():
            return True
        self.engine.unchecked_update = False
        return False

    def _nonfinite_to_save(self) -> bool:
        """Whether a :meth:`save` must not write, the parameters holding NaN/Inf
        (:meth:`_poisoned`); a WARNING says so. The last good checkpoint stays the newest:
        a run that goes on meets a non-finite loss and recovers by its action (from that
        checkpoint), a restart resumes from it. Before, ``fit``'s end-of-epoch checkpoint
        (and a loop's own ``ctx.save()``) was written from them: the recovery then rolled
        back to it, the newest, and stopped with "NaN/Inf ... again", as did every
        restart."""
        if not self._poisoned():
            return False
        log.warning(
            "parameters hold NaN/Inf at step %d: checkpoint not written (the last good one "
            "stays the newest)",
            self.step_num,
        )
        return True

    def _poisoned_checkpoint(self) -> bool:
        """With anomaly detection on, a periodic checkpoint is never written from NaN/Inf
        parameters (a NaN gradient on a step whose norm was not checked puts them there;
        they are read only when such a step was applied since they were last found finite:
        :meth:`_poisoned`): the run recovers by its action instead ("stop": the error;
        "warn": the checkpoint is left out). True when the checkpoint must not be
        written."""
        if not self._poisoned():
            return False
        assert self.anomaly is not None
        self.anomaly.count("nonfinite_params")
        if self.anomaly.action == "stop":
            self.anomaly.raise_for("nonfinite_params", self.step_num, math.nan, None)
        if self.anomaly.action == "warn":
            log.warning("parameters hold NaN/Inf at step %d: checkpoint left out", self.step_num)
        else:
            self._recover_parameters()
        return True

    def _recover_parameters(self) -> None:
        """The parameters went non-finite: a NaN/Inf gradient reached them on a step whose
        gradient norm was not checked (``grad_norm_every``), or the optimizer's state did.
        Roll back to the last checkpoint, else stop with a clear error.

        The replay computes the gradient norm on every step up to this one
        (:attr:`StepEngine.norm_until`), so a batch whose gradient is NaN/Inf is caught and
        handled by the anomaly action instead of poisoning the parameters again. Parameters
        found non-finite at the same step again after that stop the run: rolling back once
        more could not end."""
        step = self.step_num
        if step in self._recovered_for:
            raise TrainingAnomalyError(
                f"the parameters hold NaN/Inf at step {step} again after rolling back for "
                "them, although every gradient norm since the checkpoint was checked: the "
                "optimizer's update or its state puts them there. Lower the learning rate, "
                "enable gradient clipping or check the optimizer"
            )
        failing = self.engine.step_count
        if self._rollback():
            self._recovered_for.add(step)
            self.engine.norm_until = max(self.engine.norm_until, failing)
            return
        raise TrainingAnomalyError(
            f"the parameters hold NaN/Inf at step {self.step_num}, so skipping steps cannot "
            "recover; a non-finite gradient reached them on a step whose norm was not checked. "
            "Set grad_norm_every=1 to check every step, or enable checkpoints so that danlu "
            "can roll back (to a checkpoint it wrote or resumed from: none yet)"
        )

    def _rollback(self) -> bool:
        """Back to the last checkpoint of this run with a lower LR; False when there is none.

        Of this run: one it wrote or the one it resumed from (:attr:`_saved_step` is set by
        both, on every rank). Before either, the directory's newest checkpoint is another
        run's (``resume=False`` over an older run's directory): loading it "rolled back"
        into that run, its weights and its data position, many steps ahead."""
        assert self.anomaly is not None
        if self._saved_step is None:
            log.warning(
                "anomaly at step %d and no checkpoint of this run to roll back to: skipped",
                self.step_num,
            )
            return False
        self.checkpoints.wait()
        counts = dict(self.anomaly.counts)  # the checkpoint's counts miss what led here
        rollbacks = self.rollbacks
        # and its LR decay the rollbacks since it was written: each rollback compounds
        decay = self.lr.decay
        # and the OOMs since: the memory did not grow, their micro-batch limit still holds
        oom_cap, oom_count = self.batch.oom_cap, self.batch.oom_count
        if self.restore():
            self.anomaly.counts = counts
            self.anomaly.total = sum(counts.values())
            self.batch.keep_oom_limit(oom_cap, oom_count)
            self.rollbacks = rollbacks + 1
            self._rolled_back_for = {s for s in self._rolled_back_for if s >= self.step_num}
            self._recovered_for = {s for s in self._recovered_for if s >= self.step_num}
            self.lr.decay = decay
            self.lr.reduce(self.anomaly.rollback_lr_factor)
            log.warning(
                "anomaly: rolled back to step %d, LR x%.3g",
                self.step_num,
                self.anomaly.rollback_lr_factor,
            )
        else:  # nothing to roll back to: the step was already skipped
            log.warning(
                "anomaly at step %d and no checkpoint to roll back to: skipped", self.step_num
            )
            return False
        return True

    def _preempt(self) -> None:
        """Checkpoint (unless this step's checkpoint was just written: a periodic one took
        it, and a second copy would take one of ``keep_last``'s places) and exit 75. Without
        a checkpoint directory nothing can be written: a WARNING says so, and the job
        still exits 75 (docs/train.md: the control plane re-queues it, and its restart
        begins from scratch). With anomaly detection on, parameters that hold NaN/Inf are
        not checkpointed either (a WARNING says so): the restart resumes from the last
        good checkpoint, as a periodic checkpoint is never written from them."""
        self._preemption_checkpoint()
        self.close()
        raise self.preemption.exit()

    def _preemption_checkpoint(self) -> None:
        """:meth:`_preempt`'s checkpoint (or the WARNING why none is written), without the
        exit: also what a context left by another one's preemption exit writes as it closes
        (see :meth:`~danlu.train.context.TrainContext.close`)."""
        code = self.preemption.exit_code
        # why: the control plane's reason (a cancel, a time limit, a preemption, a move...),
        # Slurm's time limit, or a neutral "stop requested (SIGTERM)"
        said = self.preemption.said()
        if not self.checkpoints.enabled:
            log.warning(
                "%s at step %d: no checkpoint directory is configured "
                "(checkpoint_dir, DANLU_CHECKPOINT_DIR), so no checkpoint is written and the "
                "restart begins from scratch; exiting with %d",
                said,
                self.step_num,
                code,
            )
        elif self._saved_step == self.step_num:
            log.warning(
                "%s: step %d is already checkpointed; exiting with %d", said, self.step_num, code
            )
        elif self.anomaly is not None and self._parameters_nonfinite():
            # read whatever put them there (a NaN gradient off the norm's cadence, one
            # "warn" applied, the optimizer's own update): the restart resumes from the last
            # good checkpoint (before, from these, and failed at once on every restart)
            log.warning(
                "%s at step %d: the parameters hold NaN/Inf, so no "
                "checkpoint is written; the restart resumes from the last good one; "
                "exiting with %d",
                said,
                self.step_num,
                code,
            )
        else:
            log.warning(
                "%s: checkpointing at step %d and exiting with %d", said, self.step_num, code
            )
            self.save()
