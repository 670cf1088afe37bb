"""The training's progress bar (:class:`Progress`): Rich on an interactive terminal."""

from __future__ import annotations

import contextlib
import sys
from typing import Any

from danlu.train.checks import flag_argument, whole_argument


class Progress:
    """A Rich progress bar on an interactive terminal (rank 0), a no-op elsewhere.

    Updated every ``every`` steps so it costs nothing measurable: an integer >= 1, else a
    :class:`~danlu.core.errors.ConfigError` naming it, checked before a bar is started (``0``
    or ``-5`` was silently taken as 1, a NaN never updated the bar, ``2.5`` did on the wrong
    steps; a bool or a float is refused as :func:`danlu.train.init`'s counts are).
    ``enabled`` (``init``'s ``progress``) is True, False or None (on a terminal only); a
    string is refused naming it (``"no"`` is true: it started a bar).
    """

    def __init__(self, total: int | None, enabled: bool | None = None, every: int = 10) -> None:
        self.every = whole_argument("Progress every", every, 1)
        name = "Progress enabled (init's progress; None: on a terminal only)"
        self.enabled = sys.stdout.isatty() if enabled is None else flag_argument(name, enabled)
        self._bar: Any = None
        self._task: Any = None
        if self.enabled:
            with contextlib.suppress(ImportError):
                from rich.progress import Progress as _RichProgress

                self._bar = _RichProgress(transient=False)
                self._task = self._bar.add_task("training", total=total)
                self._bar.start()

    def update(self, step: int, record: dict[str, Any]) -> None:
        """Show ``step`` and the record's loss."""
        if self._bar is None or step % self.every:
            return
        loss = record.get("loss")
        desc = f"step {step} loss {loss:.4g}" if isinstance(loss, float) else f"step {step}"
        self._bar.update(self._task, completed=step, description=desc)

    def close(self) -> None:
        """Stop the bar."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
