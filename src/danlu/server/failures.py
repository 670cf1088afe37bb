"""Logging a failure that may repeat every reconcile pass (a full disk, a database down, a
policy that raises on the cluster's state) without a traceback every two seconds."""

from __future__ import annotations

import logging
import time

REPEAT_LOG_SECONDS = 60.0
"""While a failure repeats the same way, one line counts the repeats at most this often."""


class RepeatedFailure:
    """One kind of failure of a loop: :meth:`failed` logs it in full (with its traceback) the
    first time and when it changes, then one line counting the repeats at most every
    ``quiet_s`` seconds; :meth:`worked` logs once that it stopped."""

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
        self._repeats = 0
        self._quiet_until = 0.0

    def failed(self, exc: BaseException) -> str:
        """Note that ``exc`` was raised (call it in the ``except`` block); its summary."""
        what = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        now = time.monotonic()
        if what != self.failing:
            self.logger.error("%s failed", self.label, exc_info=exc)
            self._repeats, self._quiet_until = 0, now + self.quiet_s
        else:
            self._repeats += 1
            if now >= self._quiet_until:
                self.logger.warning("%s failed %d more times: %s", self.label, self._repeats, what)
                self._repeats, self._quiet_until = 0, now + self.quiet_s
        self.failing = what
        return what

    def worked(self) -> None:
        """Note a success: logs once after failures, then forgets them."""
        if self.failing:
            self.logger.warning("%s (after: %s)", self.recovered, self.failing)
        self.failing, self._repeats = "", 0
