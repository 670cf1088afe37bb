"""Bridge from the training context to the checkpoint engine.

The engine (:mod:`danlu.train.checkpoint` and :mod:`danlu.train.state`) is imported lazily,
when the first checkpoint directory is configured, so a run without checkpoints pays nothing.
Without a directory every method is a no-op (the do-nothing default off the cluster).
"""

from __future__ import annotations

import importlib
import logging
import os
import weakref
from collections.abc import Callable
from typing import Any

from danlu.core.errors import ConfigError, DataError

log = logging.getLogger("danlu.train")

_FAILED = "failed"
"""The key of what a rank whose ``load_latest`` raised gives the ranks' gather in place of
its checkpoint's name (a name is a string or None): why it failed."""


class Checkpoints:
    """Periodic / on-demand checkpoints through ``CheckpointManager``; no-op without a dir."""

    def __init__(
        self,
        directory: str | None,
        *,
        every_steps: int | None = None,
        every_seconds: float | None = None,
        keep_last: int = 3,
        keep_best: int = 1,
        best_metric: str | None = None,
        mode: str = "min",
        incremental: bool = False,
        async_save: bool = False,
        storage_options: dict[str, Any] | None = None,
        writer: bool = True,
        agree: Callable[[bool], bool] | None = None,
        gather: Callable[[Any], list[Any]] | None = None,
    ) -> None:
        """``agree`` (distributed runs: ``Distributed.any``) turns one rank's answer into
        every rank's: with ``every_seconds`` each rank's clock decides, so a save is due on
        all ranks once it is due on any (one tiny all-reduce a step). ``gather``
        (distributed runs: ``Distributed.all_gather_object``) makes every rank's
        :meth:`load_latest` answer the checkpoint rank 0 chose."""
        self.directory = directory
        self.writer = writer
        self._agree = agree if every_seconds is not None else None
        self._gather = gather
        self._manager: Any = None
        self._claimed: str | None = None
        """The directory's key (:func:`_directory_key`) while this one claims it."""
        self.enabled = False
        """True when checkpoints are written somewhere (a plain flag: read on every step)."""
        if directory is None:
            return
        try:
            module = importlib.import_module("danlu.train.checkpoint")
            manager_cls = module.CheckpointManager
        except (ImportError, AttributeError) as exc:
            raise ConfigError(
                f"checkpointing to {directory!r} needs danlu.train.checkpoint: {exc}"
            ) from exc
        self._manager = manager_cls(
            directory,
            keep_last=keep_last,
            keep_best=keep_best,
            best_metric=best_metric,
            mode=mode,
            incremental=incremental,
            async_save=async_save,
            storage_options=storage_options,
            every_steps=every_steps,
            every_seconds=every_seconds,
        )
        self.enabled = True

    def should_save(self, step: int) -> bool:
        """True when the periodic policy says ``step`` is due (the same answer on every rank:
        by steps alone it is; by seconds, the ranks agree)."""
        if self._manager is None:
            return False
        due = bool(self._manager.should_save(step))
        return due if self._agree is None else self._agree(due)

    def note_saved(self, step: int) -> None:
        """A checkpoint of ``step`` was written by another rank: the periodic policy of this
        one counts from it, as the writer's does."""
        if self._manager is not None:
            self._manager.note_saved(step)

    def save(self, step: int, state: dict[str, Any], metrics: dict[str, float] | None) -> None:
        """Persist ``state`` (only on the writer rank)."""
        if self._manager is not None and self.writer:
            self._manager.save(step, state, metrics=metrics)

    @property
    def committed_step(self) -> int | None:
        """The step of the checkpoint this rank's writer committed last (its manifest
        written); None before any, and on the ranks that write none."""
        if self._manager is None or not self.writer:
            return None
        step = self._manager.committed_step
        return None if step is None else int(step)

    @property
    def run_id(self) -> str | None:
        """The run the checkpoints belong to (:attr:`CheckpointManager.run_id`); None
        without a directory, or before a save or resume gave it one."""
        return None if self._manager is None else self._manager.run_id

    def join_run(self, run: str | None) -> None:
        """Count ``run``'s checkpoints as this run's own (a rank that writes none takes the
        writer's, so that every rank's rollback falls back alike)."""
        if self._manager is not None:
            self._manager.join_run(run)

    def wait(self) -> None:
        """Wait for a background save to finish."""
        if self._manager is not None:
            self._manager.wait()

    def load_latest(self) -> tuple[int, dict[str, Any]] | None:
        """The newest valid checkpoint as ``(step, state)``, or None."""
        if self._manager is None:
            return None
        out = self._manager.load_latest() if self._gather is None else self._agreed_latest()
        return None if out is None else (int(out[0]), out[1])

    def _agreed_latest(self) -> tuple[int, dict[str, Any]] | None:
        """:meth:`_as_rank_zero` of this rank's ``load_latest``, which may fail on one rank
        alone (its listing or a manifest's read refused by a network filesystem, a node's
        stale mount): that rank still joins the ranks' gather, saying why
        (``{"failed": ...}`` in place of its checkpoint's name), and every rank raises.
        Before, it raised at once and the others waited at the gather until the
        collective timeout (300 s by default), then failed on a timeout naming nothing."""
        assert self._gather is not None and self._manager is not None
        try:
            out = self._manager.load_latest()
        except Exception as exc:
            try:
                self._gather({_FAILED: f"{type(exc).__name__}: {exc}"})
            except Exception as told:  # this rank's own error says more than the gather's
                exc.add_note(f"telling the other ranks failed too: {told}")
            raise
        return self._as_rank_zero(out)

    def _as_rank_zero(
        self, out: tuple[int, dict[str, Any]] | None
    ) -> tuple[int, dict[str, Any]] | None:
        """A distributed run's ranks each chose a checkpoint (``out``, this rank's): when
        they differ, every rank takes rank 0's (the writer's), or they all fail together.

        The ranks read the same directory, but a read can fail on one rank alone (a network
        filesystem's or an object store's passing error, a node's stale cache): that rank
        fell back to an older checkpoint, or to none, while the others loaded the newest.
        Before, the ranks went on from different steps and weights (a rank at step 0 next to
        ranks at step 400), and DDP kept them apart for good. Raises :class:`DataError` on
        every rank when one cannot load rank 0's choice, or rank 0 found none that another
        found (a restart reads them again)."""
        assert self._gather is not None and self._manager is not None
        mine = self._manager.loaded if out is not None else None
        names = self._gather(mine)
        failed = [
            f"rank {r}: {name[_FAILED]}"
            for r, name in enumerate(names)
            if isinstance(name, dict) and _FAILED in name
        ]
        if failed:  # those ranks raised their own error (see _agreed_latest)
            raise DataError(
                f"looking for the newest checkpoint in {self.directory} failed on another "
                f"rank ({'; '.join(failed)}); every rank stops with it, and a restart looks "
                "again"
            )
        chosen = names[0]
        if all(name == chosen for name in names):
            return out
        failure: str | None = None
        if chosen is None:
            failure = "rank 0 found no valid checkpoint of the run"
        elif mine != chosen:
            try:
                out = self._manager.load_chosen(chosen)
            except (OSError, DataError) as exc:
                failure = f"this rank cannot load it: {exc}"
        failures = self._gather(failure)
        said = [f"rank {r}: {f}" for r, f in enumerate(failures) if f is not None]
        if said:
            found = ", ".join(f"rank {r}: {n or 'none'}" for r, n in enumerate(names))
            raise DataError(
                f"the ranks do not agree on the checkpoint to resume from in "
                f"{self.directory} ({found}); {'; '.join(said)}. A read that failed on some "
                "ranks only (a passing storage error) is read again by a restart"
            )
        log.warning(
            "ranks chose different checkpoints in %s (%s): every rank resumed from rank 0's, %s",
            self.directory,
            ", ".join(f"rank {r}: {n or 'none'}" for r, n in enumerate(names)),
            chosen,
        )
        return out

    def claim_directory(self) -> None:
        """Note the directory as in use by this open run (``init`` calls it before
        resuming), with a WARNING when another open one of this process checkpoints to the
        same one (an ``init`` inside another's ``with``, both on ``DANLU_CHECKPOINT_DIR``):
        this run resumes from that one's checkpoints, and each prunes the other's.
        :meth:`close` gives it up."""
        if self._manager is None or self.directory is None:
            return
        mine = _directory_key(self._manager.storage, self.directory)
        if any(other._claimed == mine for other in list(_CLAIMED)):
            log.warning(
                "checkpoint directory %s is already in use by another open training context "
                "of this process: this one resumes from its checkpoints and the two prune "
                "each other's; give each context its own checkpoint_dir",
                self.directory,
            )
        self._claimed = mine
        _CLAIMED.add(self)

    def close(self) -> None:
        """Finish pending saves and release the manager (and the directory's claim)."""
        _CLAIMED.discard(self)
        self._claimed = None
        if self._manager is not None:
            self._manager.close()
            self._manager = None
            self.enabled = False


_CLAIMED: weakref.WeakSet[Checkpoints] = weakref.WeakSet()
"""The open :class:`Checkpoints` of this process that claimed their directory."""


def _directory_key(storage: Any, directory: str) -> str:
    """What two checkpoint directories compare by: a local one's path with its links
    resolved (the ``storage`` opened on it made it, against the working directory of then:
    ``ck`` opened in ``/a`` is ``/a/ck`` after a ``chdir``), a URL with its scheme in lower
    case and no trailing slash (as the storage opens it). ``directory`` is what the
    storage was opened on."""
    from danlu.train.checkpoint.storage import LocalStorage

    if isinstance(storage, LocalStorage):
        return os.path.realpath(storage.root)
    scheme, sep, rest = directory.partition("://")
    return scheme.lower() + sep + rest.rstrip("/")


def state_api() -> Any:
    """The :mod:`danlu.train.state` module (``capture_state`` / ``restore_state``)."""
    return importlib.import_module("danlu.train.state")
