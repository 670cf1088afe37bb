"""Why a run is being stopped, for the line of its log that says it checkpoints and exits 75.

A SIGTERM says nothing of who sent it: a preemption by a higher-priority job, a move to other
GPUs, a node's drain, ``danlu cancel``, the job's ``deadline`` or ``time_limit``, or something
outside danlu (a host shutting down, a ``kill``, Slurm's own time limit). The control plane
records why it stops a run before it signals it, and the run's own token (``DANLU_TOKEN``) may
read it: ``GET {DANLU_API_URL}/api/v1/jobs/{DANLU_JOB_ID}/stopping`` answers ``{"reason":
"cancelled by alice"}``, or null when the control plane is stopping no run of the job. Slurm
tells a job the time its limit ends it (``SLURM_JOB_END_TIME``), so a SIGTERM at or after it
is Slurm's time limit. Where neither says, the line says ``stop requested (SIGTERM)``.

:class:`StopCause` asks the control plane off the signal handler: the handler only notes the
signal (:class:`~danlu.train.preempt.Preemption`); the question starts, in a daemon thread,
at the step boundary that sees it (:meth:`StopCause.ask`, on the main thread: a thread
started inside the handler could wait for ``threading``'s own lock held by the interrupted
code, for ever). The checkpoint waits for the answer at most :data:`ASK_TIMEOUT_S` from
then (:meth:`StopCause.reason`): a slow or unreachable server costs it no more, and its
line then says ``stop requested (SIGTERM)``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from danlu.train.env import JobEnv
from danlu.train.report_requests import _OPENER

log = logging.getLogger("danlu.train")

ASK_TIMEOUT_S = 1.0
"""Seconds the preemption's checkpoint waits at most for the control plane's answer, from the
step boundary that saw the SIGTERM (it runs within the job's grace before the SIGKILL)."""

SLURM_CLOCK_SLACK_S = 5.0
"""Seconds before ``SLURM_JOB_END_TIME`` at which a SIGTERM still counts as Slurm's time
limit: the controller's clock and the node's may differ a little (Slurm signals at or after
the end time, never before it by its own clock)."""

MAX_REASON_CHARS = 300
"""The most characters of the control plane's reason the log line carries."""

SLURM_TIME_LIMIT = "Slurm's time limit: the job's end time (SLURM_JOB_END_TIME) has passed"
"""What the line says of a SIGTERM at Slurm's end time that the control plane did not send."""


def _printable(text: str) -> str:
    """``text`` on one line (a control character or line break as a blank), at most
    :data:`MAX_REASON_CHARS` characters: it goes into a log line."""
    flat = "".join(c if c.isprintable() else " " for c in text).strip()
    if len(flat) > MAX_REASON_CHARS:
        flat = flat[: MAX_REASON_CHARS - 3] + "..."
    return flat


def _read_reason(url: str, token: str | None, timeout_s: float) -> str | None:
    """The control plane's ``reason`` at ``url`` (``GET .../stopping``); None when it says
    none. Raises ``OSError`` (an ``urllib.error.URLError``, a timeout) or ``ValueError`` (an
    answer that is not the API's) when it cannot tell."""
    request = urllib.request.Request(url, method="GET")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with _OPENER.open(request, timeout=timeout_s) as reply:
        answer = json.loads(reply.read() or b"null")
    if not isinstance(answer, dict) or "reason" not in answer:
        raise ValueError(f"not the API's answer: {str(answer)[:80]!r}")
    reason = answer["reason"]
    if reason is None:
        return None
    if not isinstance(reason, str):
        raise ValueError(f"its reason is not a string: {reason!r:.80}")
    return _printable(reason) or None


class StopCause:
    """Asks the control plane why this run is being stopped (see the module docstring).

    ``url``: where (:attr:`JobEnv.stopping_url`; None: no API, nothing is asked); ``token``:
    the run's; ``slurm_end_time``: ``SLURM_JOB_END_TIME`` (POSIX seconds; None off Slurm);
    ``timeout_s``: :data:`ASK_TIMEOUT_S`; ``clock``: monotonic seconds, which time it.
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        slurm_end_time: float | None = None,
        *,
        timeout_s: float = ASK_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self.token = token
        self.slurm_end_time = slurm_end_time
        self.timeout_s = timeout_s
        self._clock = clock
        self._asked_at: float | None = None
        self._answered = threading.Event()
        self._answer: str | None = None

    @classmethod
    def from_env(cls, env: JobEnv, timeout_s: float = ASK_TIMEOUT_S) -> StopCause:
        """The cause of ``env``'s job: its API and token, its Slurm end time."""
        return cls(env.stopping_url, env.token, env.slurm_job_end_time, timeout_s=timeout_s)

    def ask(self) -> None:
        """Start asking the control plane, once, in a daemon thread; nothing without an API.
        Called on the main thread at the step boundary that sees the stop, never in the
        signal handler (see the module docstring)."""
        if self._asked_at is not None or self.url is None:
            return
        self._asked_at = self._clock()
        threading.Thread(target=self._run, name="danlu-stop-cause", daemon=True).start()

    def _run(self) -> None:
        assert self.url is not None
        try:
            self._answer = _read_reason(self.url, self.token, self.timeout_s)
        except (OSError, ValueError) as exc:
            # an older control plane (404, 403), a revoked token, a slow one: the line is
            # neutral then, and nothing else depends on it
            log.debug("could not ask the control plane why the run is being stopped: %s", exc)
        finally:
            self._answered.set()

    def reason(self, signalled_at: float | None) -> str | None:
        """Why the run is being stopped, for ``stop requested (...)``: the control plane's
        reason, waited for at most :attr:`timeout_s` after :meth:`ask` (which this calls
        when it was not called yet); else :data:`SLURM_TIME_LIMIT` when the SIGTERM came
        (``signalled_at``, POSIX seconds) at or after Slurm's end time; else None."""
        self.ask()
        if self._asked_at is not None:
            self._answered.wait(max(0.0, self._asked_at + self.timeout_s - self._clock()))
        if self._answered.is_set() and self._answer is not None:
            return self._answer
        end = self.slurm_end_time
        if (
            signalled_at is not None
            and end is not None
            and signalled_at >= end - SLURM_CLOCK_SLACK_S
        ):
            return SLURM_TIME_LIMIT
        return None
