"""Preemption: SIGTERM asks the job to checkpoint at the next step boundary and exit.

The handler only sets a flag (and notes the time); :meth:`Preemption.should_stop` is polled at
step boundaries and, in a distributed run, agreed across ranks (any rank signalled means all
stop at the same step). The job then exits with :data:`danlu.train.env.PREEMPTED_EXIT_CODE`,
its log naming why it was stopped where it can know (:meth:`Preemption.said`,
:mod:`danlu.train.stop_cause`).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
import weakref
from types import FrameType
from typing import Any

from danlu.train.checks import whole_argument
from danlu.train.distributed import Distributed
from danlu.train.env import PREEMPTED_EXIT_CODE
from danlu.train.stop_cause import StopCause

log = logging.getLogger("danlu.train")


class Preempted(SystemExit):
    """The exit of a preempted context (its code :data:`PREEMPTED_EXIT_CODE`): a
    ``SystemExit`` as before, told apart from others. Raised by :meth:`Preemption.exit`,
    which tells the other open contexts, so that one open around the one that raised it
    checkpoints as it closes (every rank alike: the ranks agreed on the stop)."""


class Preemption:
    """Installs a SIGTERM handler (main thread only) and answers "should we stop now?".

    ``check_every``: every how many steps a distributed run's ranks agree on a stop, an
    integer >= 1 (anything else is a :class:`~danlu.core.errors.ConfigError` naming it).
    ``cause``: who to ask why a SIGTERM came (:class:`~danlu.train.stop_cause.StopCause`;
    default: nobody, the log says ``stop requested (SIGTERM)``).
    """

    exit_code = PREEMPTED_EXIT_CODE

    def __init__(
        self,
        dist: Distributed | None = None,
        *,
        install: bool = True,
        check_every: int = 1,
        cause: StopCause | None = None,
    ) -> None:
        # step % nan is NaN (true): a distributed run never agreed on a stop; 2.5 is no count
        self.check_every = whole_argument("check_every", check_every, 1)
        self.dist = dist or Distributed()
        self.cause = cause or StopCause()
        self.requested = False
        """True once this rank was signalled (or :meth:`request` was called). A plain flag:
        the handler runs on the main thread between bytecodes, and the step reads it on
        every step."""
        self.signalled_at: float | None = None
        """When the first SIGTERM reached this rank (POSIX seconds); None before, and when
        only :meth:`request` (or another rank's signal) asked for the stop."""
        self._agreed = False
        """True once the ranks agreed on a stop this rank was not asked for itself."""
        self.other_exited = False
        """True once another context's preemption exit (:meth:`exit`) ran while this one
        was open: an ``init`` inside this one's ``with`` block that stopped first (every
        rank alike: the ranks agreed on its stop). Its context then checkpoints as it
        closes, by its ``with`` or by hand, unless the exit was caught inside it: see
        :meth:`forget_other_exit`."""
        self._previous: Any = None
        self._installed = False
        _OPEN.add(self)
        if install and threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._on_signal)
            self._installed = True
            _INSTALLED.append(self)
            self._say_handler_set_aside()

    def _say_handler_set_aside(self) -> None:
        """WARN that the script's own SIGTERM handler, installed before this, is not called
        while this is installed (it may exit at once, before the checkpoint): before, it
        was silently never called, and its clean-up never ran."""
        previous = self._previous
        if not callable(previous) or isinstance(getattr(previous, "__self__", None), Preemption):
            return  # SIG_DFL, SIG_IGN, one installed from C (None), or an outer context's
        name = getattr(previous, "__qualname__", None) or repr(previous)
        log.warning(
            "SIGTERM's handler %s, installed before danlu.train.init, is not called while "
            "the training context is open: on SIGTERM the context checkpoints at the next "
            "step and exits with %d (a SystemExit: put clean-up in a finally block or after "
            "the with block); the handler is given back when the context closes",
            name,
            self.exit_code,
        )

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # a flag and the time only: no I/O, no lock, no thread here (see danlu.train.stop_cause)
        if self.signalled_at is None:
            self.signalled_at = time.time()
        self.requested = True
        # A context opened inside another (a second init in one process) took SIGTERM from
        # the outer one's Preemption: pass it on, or the outer run trained on, unsignalled,
        # and was killed after the grace without its checkpoint. A foreign handler is not
        # called (it may exit at once).
        outer = getattr(self._previous, "__self__", None)
        if isinstance(outer, Preemption):
            outer._on_signal(signum, frame)

    def request(self) -> None:
        """Ask for a stop as if SIGTERM had arrived (tests, or a user's own trigger)."""
        self.requested = True

    def exit(self) -> Preempted:
        """The exit of this preempted context, to raise; every other open one is told
        (:attr:`other_exited`)."""
        for other in list(_OPEN):
            if other is not self:
                other.other_exited = True
        return Preempted(self.exit_code)

    def forget_other_exit(self) -> None:
        """Clear :attr:`other_exited`: the other context's exit did not end this one's run.
        Its context calls this when it takes a step (the script caught the exit and trained
        on) and when its ``with`` block is left by anything but a preemption exit; set for
        good, the flag made a context closed much later write a preemption checkpoint and
        log "exiting with 75" though nothing exited."""
        self.other_exited = False

    def should_stop(self, step: int) -> bool:
        """True on every rank when any rank was signalled (checked every ``check_every``
        steps in distributed runs, every step alone). A signalled rank starts asking why
        (:meth:`StopCause.ask`) at the first boundary that sees the signal."""
        if self.signalled_at is not None:
            self.cause.ask()
        if not self.dist.enabled:
            return self.requested
        if step % self.check_every:
            return False
        stop = self.dist.any(self.requested)
        if stop and not self.requested:
            self._agreed = True
        return stop

    def said(self) -> str:
        """How the log names this stop: ``stop requested (REASON)`` with the control plane's
        reason or Slurm's time limit (:meth:`StopCause.reason`, waited for briefly), else
        ``stop requested (SIGTERM)`` for a signal no one explained, ``stop requested (another
        rank was signalled)`` on a rank that agreed to another's stop, and ``stop requested``
        for :meth:`request`. Call it as the stop is acted on (not in the signal handler)."""
        if self.signalled_at is not None:
            why = self.cause.reason(self.signalled_at) or "SIGTERM"
        elif self._agreed:  # the control plane may know: it stops every rank alike
            why = self.cause.reason(None) or "another rank was signalled"
        else:
            return "stop requested"
        return f"stop requested ({why})"

    def close(self) -> None:
        """Restore the previous SIGTERM handler. One that Python cannot give back (installed
        by C code, a launcher's MPI library say: ``signal.signal`` returned None for it) is
        replaced by the default action; passing None back raised ``TypeError`` from
        ``close``, and a preempted job exited 1 (a failure) instead of 75.

        One closed while another, installed after it, is still open (two nested contexts
        left out of order: the outer one's preemption exit ran through the inner one's
        ``with``) is taken out of that one's chain instead: restoring its own previous
        handler dropped the open one's, and once both closed the closed outer one's was
        left installed, so a later SIGTERM only set a flag nobody read."""
        _OPEN.discard(self)
        if not self._installed:
            return
        self._installed = False
        _INSTALLED.remove(self)
        later = next((p for p in _INSTALLED if p._previous == self._on_signal), None)
        if later is not None:  # it passes the signal on to ours: to our previous one now
            later._previous = self._previous
            return
        previous = signal.SIG_DFL if self._previous is None else self._previous
        signal.signal(signal.SIGTERM, previous)


_OPEN: weakref.WeakSet[Preemption] = weakref.WeakSet()
"""The :class:`Preemption` objects not closed yet (installed or not), which a preemption exit
tells (:meth:`Preemption.exit`)."""

_INSTALLED: list[Preemption] = []
"""The :class:`Preemption` objects whose SIGTERM handler is installed, oldest first."""
