"""Bridge from the training context to the checkpoint engine.

The engine (:mod:`danlu.train.checkpoint` and :mod:`danlu.train.state`) is imported lazily,
when the first checkpoint directory is configured, so a run without checkpoints pays nothing.
Without a directory every method is a no-op (the do-nothing default off the cluster).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from danlu.core.errors import ConfigError


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
    ) -> None:
        """``agree`` (distributed runs: ``Distributed.any``) turns one rank's answer into
        every rank's: with ``every_seconds`` each rank's clock decides, so a save is due on
        all ranks once it is due on any (one tiny all-reduce a step)."""
        self.directory = directory
        self.writer = writer
        self._agree = agree if every_seconds is not None else None
        self._manager: Any = None
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
        out = self._manager.load_latest()
        return None if out is None else (int(out[0]), out[1])

    def close(self) -> None:
        """Finish pending saves and release the manager."""
        if self._manager is not None:
            self._manager.close()
            self._manager = None
            self.enabled = False


def state_api() -> Any:
    """The :mod:`danlu.train.state` module (``capture_state`` / ``restore_state``)."""
    return importlib.import_module("danlu.train.state")
