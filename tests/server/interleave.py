"""Two transactions interleaved deterministically, as a race on PostgreSQL (READ COMMITTED)
would interleave them: the first is paused at a step of its own (:meth:`Interleave.pause`,
called by the test's code or patched into a service with :meth:`Interleave.pause_at`), the
second runs in another session meanwhile, to its end or until it waits for a row lock the
first holds, and then the first goes on. On SQLite, whose writers are serialised (every
write transaction begins with ``BEGIN IMMEDIATE``), the second would wait for the first's
commit: the pause is a no-op and the two run one after the other, as they would there."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from danlu.server.db import Database

LIMIT = 60.0
"""Seconds any step may take before the test gives up (a guard against a hang only)."""


@dataclass
class Outcome:
    """What the two transactions returned or raised, and whether the second waited for a
    lock of the first's."""

    first: Any = None
    second: Any = None
    first_error: BaseException | None = None
    second_error: BaseException | None = None
    second_waited: bool = False


class Interleave:
    """Run ``first`` and ``second``, each in its own ``db.session()``, the second while the
    first is paused (PostgreSQL)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.concurrent = db.dialect == "postgresql"
        self._reached = threading.Event()
        self._go = threading.Event()
        self._paused = False
        self._first_thread: threading.Thread | None = None

    def pause(self) -> None:
        """Called in the first transaction: stop here (once) until the second has run or
        waits for a lock (PostgreSQL; a no-op on SQLite)."""
        if not self.concurrent or self._paused:
            return
        if threading.current_thread() is not self._first_thread:
            return
        self._paused = True
        self._reached.set()
        if not self._go.wait(LIMIT):
            raise AssertionError("the first transaction was never resumed")

    def pause_at(
        self, monkeypatch: pytest.MonkeyPatch, owner: object, name: str, *, before: bool = False
    ) -> None:
        """Patch ``owner.name`` (a module's function) to :meth:`pause` after it returns, or
        ``before`` it is called, in the first transaction."""
        original = getattr(owner, name)

        def paused(*args: Any, **kwargs: Any) -> Any:
            if before:
                self.pause()
            out = original(*args, **kwargs)
            if not before:
                self.pause()
            return out

        monkeypatch.setattr(owner, name, paused)

    def run(self, first: Callable[[Session], Any], second: Callable[[Session], Any]) -> Outcome:
        """``first``, paused; ``second`` meanwhile; then ``first`` to its commit."""
        out = Outcome()

        def run_first() -> None:
            try:
                with self.db.session() as session:
                    out.first = first(session)
            except BaseException as exc:  # reported in the outcome
                out.first_error = exc
            finally:
                self._reached.set()  # ended without pausing: nothing to wait for

        def run_second() -> None:
            try:
                with self.db.session() as session:
                    out.second = second(session)
            except BaseException as exc:
                out.second_error = exc

        if not self.concurrent:
            run_first()
            run_second()
            return out
        one = threading.Thread(target=run_first)
        self._first_thread = one
        one.start()
        if not self._reached.wait(LIMIT):
            raise AssertionError("the first transaction never reached its pause")
        two = threading.Thread(target=run_second)
        two.start()
        out.second_waited = self._wait_for(two)
        self._go.set()
        one.join(LIMIT)
        two.join(LIMIT)
        assert not one.is_alive() and not two.is_alive(), "a transaction did not end"
        return out

    def _wait_for(self, second: threading.Thread) -> bool:
        """Until ``second`` has ended (False) or waits for a lock (True)."""
        deadline = time.monotonic() + LIMIT
        with self.db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            waiting = text(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            while second.is_alive():
                if conn.execute(waiting).scalar_one():
                    return True
                if time.monotonic() > deadline:
                    raise AssertionError("the second transaction neither ended nor waited")
                time.sleep(0.01)
        return False
