"""Waiting for jobs, sweeps and job arrays to end: :meth:`Client.wait`'s loop
(:func:`wait_for`, which also rides out a control-plane restart) and :func:`wait_all`, which
``danlu wait`` uses. A sweep or job array is judged from ``GET /sweeps/{id}`` alone (its
state and its trials' states: one request a poll however many tasks it has), and once it has
ended its trials' Jobs are read from ``GET /jobs`` listing them by name (a request per 1,000
jobs), never one request per task."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeVar

from danlu.client.discovery import API_PREFIX
from danlu.client.errors import (
    JobDict,
    NotFoundError,
    ServerError,
    ServerUnavailable,
    WaitTimeout,
    out_of_reach,
)
from danlu.core.errors import SpecError
from danlu.core.sweep import trial_name
from danlu.core.values import quoted

if TYPE_CHECKING:
    from danlu.client.rest import Client

MAX_SLEEP = 86_400.0
"""The longest one sleep between two looks lasts (seconds): a longer ``poll`` looks once a
day (``time.sleep`` cannot take more than about 9.2e9 s: OverflowError)."""

MIN_POLL = 0.1
"""The shortest pause (seconds) between two looks of a wait: a smaller ``poll`` (0 too) is
taken as this one, as ``danlu wait --poll`` takes nothing below 0.1 s and a log follow's
``reconnect_delay`` nothing below :data:`~danlu.client.rest.MIN_RECONNECT_DELAY`. A poll of
``1e-9`` was a loop of requests as fast as the server answered."""

FINISHED_STATES = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
"""The states a job ends in."""

K = TypeVar("K", bound=Hashable)
R = TypeVar("R")


class Clock(Protocol):
    """What :func:`wait_for` reads the time with: the ``time`` module, or a stand-in."""

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float, /) -> None: ...


@dataclass(frozen=True)
class Waited:
    """A job, sweep or job array waited for: ``kind`` (``job``, ``sweep`` or ``array``),
    its full ``id`` and its ``name``; ``str()`` is ``array ID (NAME)``."""

    kind: str
    id: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.id} ({self.name})"


@dataclass(frozen=True)
class Ended:
    """How a :class:`Waited` ended: ``jobs``, the job's Job or a sweep's trials' Jobs in
    trial order, and for a sweep or job array the ``sweep`` as ``GET /sweeps/{id}``
    answered once it had ended."""

    waited: Waited
    jobs: list[JobDict]
    sweep: dict[str, Any] | None = None


def check_seconds(
    name: str, value: float, *, positive: bool = False, endless: bool = False
) -> None:
    """Refuse (:class:`SpecError` naming ``name``) a number of seconds that a sleep or a
    deadline cannot take: not a number (text, a bool: ``True`` was read as 1 s), NaN (no
    deadline ever passes it), below 0 (``positive``: 0 too), infinity unless ``endless``
    (``time.sleep`` and socket timeouts cannot take it)."""
    _check_number(name, value)
    ok = value > 0 if positive else value >= 0
    if not (ok and (endless or value < math.inf)):
        what = f"{'positive' if positive else 'non-negative'}{'' if endless else ' finite'}"
        raise SpecError(name, f"must be a {what} number of seconds (got {value})")


def _check_number(name: str, value: object) -> None:
    """Refuse (:class:`SpecError` naming ``name``) a ``value`` that is not an int or float:
    text or None gave a bare TypeError at the first comparison, a bool is an int to Python."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise SpecError(name, f"must be a number of seconds (got {quoted(value)})")


def check_limits(
    timeout: float | None, busy_retries: int, reconnect_for: float, follow_read_timeout: float
) -> None:
    """Refuse (:class:`SpecError`) a :class:`~danlu.client.rest.Client`'s limits that no
    request or wait can keep: a ``timeout`` (None: none) NaN, 0, below 0 or infinite, a
    ``reconnect_for`` NaN or below 0 (infinite: never give up), a ``follow_read_timeout``
    NaN, 0, below 0 or infinite, ``busy_retries`` not a whole number (``range()`` refused a
    float at the first request) or below 0."""
    if timeout is not None:
        check_seconds("timeout", timeout, positive=True)
    check_seconds("reconnect_for", reconnect_for, endless=True)
    check_seconds("follow_read_timeout", follow_read_timeout, positive=True)
    if not isinstance(busy_retries, int) or isinstance(busy_retries, bool):
        raise SpecError("busy_retries", f"must be a whole number (got {quoted(busy_retries)})")
    if busy_retries < 0:
        raise SpecError("busy_retries", f"must be 0 or more (got {busy_retries})")


def wait_for(
    client: Client,
    keys: Sequence[K],
    look: Callable[[K], R | None],
    *,
    timeout: float | None,
    poll: float,
    timed_out: Callable[[list[K], list[R]], WaitTimeout],
    on_end: Callable[[R], None] | None = None,
    clock: Clock = time,
) -> list[R]:
    """Call ``look(key)`` for each of ``keys`` not ended yet every ``poll`` seconds until it
    has returned what the key ended as (None: not ended yet) for each; returns those in the
    order of ``keys``; ``poll`` is at least :data:`MIN_POLL` (a smaller one, 0 too, is taken
    as that; a negative, NaN or infinite one is a :class:`SpecError` naming it). ``on_end``
    is called with each once it is seen. After ``timeout``
    seconds (None: no limit) raises ``timed_out(the keys not ended, what the others ended
    as)``. A server lost once it has answered (a restart) is asked again for up to
    :attr:`Client.reconnect_for` seconds. ``clock``: what it reads the time and sleeps
    with."""
    check_seconds("poll", poll)
    poll = max(poll, MIN_POLL)  # 0 or 1e-9: a loop of requests as fast as the server answers
    if on_end is not None and not callable(on_end):  # a bare TypeError once one had ended
        raise SpecError("on_end", f"must be a function or None (got {quoted(on_end)})")
    if timeout is not None:
        _check_number("timeout", timeout)
    if timeout is not None and math.isnan(timeout):
        raise SpecError("timeout", "must be a number of seconds, or None for no limit (got nan)")
    order = list(dict.fromkeys(keys))
    unfinished = list(order)
    ended: dict[K, R] = {}
    deadline = None if timeout is None else clock.monotonic() + timeout
    lost_at: float | None = None  # when the server stopped answering, if it has
    while True:
        for key in list(unfinished):
            try:
                result = look(key)
                lost_at = None
            except (ServerUnavailable, ServerError) as exc:
                if not out_of_reach(exc):
                    raise
                lost_at = client._reconnect_or_raise(lost_at)
                break
            if result is not None:
                ended[key] = result
                unfinished.remove(key)
                if on_end is not None:
                    on_end(result)
        if not unfinished:
            return [ended[key] for key in order]
        left = None if deadline is None else deadline - clock.monotonic()
        if left is not None and left <= 0:
            raise timed_out(unfinished, [ended[key] for key in order if key in ended])
        clock.sleep(min(poll, MAX_SLEEP) if left is None else min(poll, left, MAX_SLEEP))


def resolve(client: Client, key: str) -> Waited:
    """What ``key`` (an id or a unique prefix) names: the job, else the sweep or job array
    (:class:`NotFoundError` saying so when it names neither)."""
    try:
        job = client.get_job(key)
    except NotFoundError:
        try:
            sweep = client.sweep(key)
        except NotFoundError:
            raise NotFoundError(
                404, "NotFoundError", None, f"no job, sweep or job array {key!r}"
            ) from None
        kind = "array" if sweep.get("array") else "sweep"
        return Waited(kind, asked_for(sweep, "sweeps", key), str(sweep.get("name")))
    return Waited("job", asked_for(job, "jobs", key), str(job.get("name")))


def asked_for(reply: dict[str, Any], route: str, key: str) -> str:
    """The ``id`` of ``reply``, the answer to ``GET /{route}/{key}``, when it is the one
    asked for: a string that is ``key`` or begins with it, in any case (``key`` may be a
    unique prefix, which the server's database may match so); else :class:`ServerError`
    naming the request (a reply without an id, or one for another job or sweep, is never
    waited on as if it were the one asked for)."""
    found = reply.get("id")
    if isinstance(found, str) and found.lower().startswith(key.lower()):
        return found
    got = f"the reply is for {quoted(found)}" if isinstance(found, str) else "the reply has no id"
    return _bad_reply(route, key, f"{got}, not {quoted(key)}")


def _bad_reply(route: str, key: str, what: str) -> NoReturn:
    """Raise :class:`ServerError` for the reply to ``GET /{route}/{key}`` saying ``what``."""
    path = f"{API_PREFIX}/{route}/{key}"
    raise ServerError(200, "http", None, f"GET {path}: {what}", "GET", path)


def asked_job(client: Client, key: str) -> JobDict:
    """``GET /jobs/{key}`` (:meth:`Client.get_job`) when it answers the job asked for
    (:func:`asked_for`)."""
    job = client.get_job(key)
    asked_for(job, "jobs", key)
    return job


def trials_of(sweep: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """The ``trials`` of ``sweep`` (the answer to ``GET /sweeps/{key}``; missing or null:
    none), each an object naming its ``job_id``; else :class:`ServerError` naming the
    request."""
    trials = sweep.get("trials")
    if trials is None:
        return []
    if not isinstance(trials, list):
        _bad_reply("sweeps", key, f"its trials are a {type(trials).__name__}, not a JSON array")
    for index, trial in enumerate(trials):
        if not isinstance(trial, dict) or not isinstance(trial.get("job_id"), str):
            _bad_reply("sweeps", key, f"its trial {index} names no job_id")
    return trials


def wait_all(
    client: Client,
    waited: Sequence[Waited],
    *,
    timeout: float | None,
    poll: float,
    on_end: Callable[[Ended], None] | None = None,
) -> list[Ended]:
    """Wait until each of ``waited`` (:func:`resolve`) has ended: a job once it finished,
    a sweep or job array once it is no longer RUNNING and every one of its trials has
    finished (judged from ``GET /sweeps/{id}``: one request a poll). Returns how each ended,
    in order; ``on_end`` as :func:`wait_for`. After ``timeout`` seconds :class:`WaitTimeout`
    names each one not ended as what it is (``array ID (NAME)``), its ``finished`` the Jobs
    of those that had ended. Jobs alone are waited for by :meth:`Client.wait`."""
    order = list(dict.fromkeys(waited))

    def timed_out(left: list[Waited], done: list[Ended]) -> WaitTimeout:
        finished = [job for end in done for job in end.jobs]
        ids = [one.id for one in left]
        return WaitTimeout(ids, finished, timeout or 0.0, timeout_message(left, timeout or 0.0))

    if all(one.kind == "job" for one in order):
        by_id = {one.id: one for one in order}

        def of(job: JobDict) -> Ended:
            # Client.wait checked each reply is the job asked for: its id begins with one
            got = str(job.get("id")).lower()
            mine = (one for one in order if got.startswith(one.id.lower()))
            return Ended(max(mine, key=_id_len), [job])

        def job_ended(job: JobDict) -> None:
            if on_end is not None:
                on_end(of(job))

        try:
            jobs = client.wait(list(by_id), timeout=timeout, poll=poll, on_end=job_ended)
        except WaitTimeout as exc:
            done = [of(job) for job in exc.finished]
            raise timed_out([by_id[key] for key in exc.unfinished], done) from None
        return [of(job) for job in jobs]
    return wait_for(
        client,
        order,
        lambda one: look(client, one),
        timeout=timeout,
        poll=poll,
        timed_out=timed_out,
        on_end=on_end,
    )


def _id_len(one: Waited) -> int:
    return len(one.id)


def timeout_message(left: Sequence[Waited], timeout: float) -> str:
    """What a wait that ran out of time says of ``left``, those not ended: each as what it
    is by its full id and name, or, when all are jobs, ``N job(s) not finished ...: ID
    (NAME)``."""
    if all(one.kind == "job" for one in left):
        names = ", ".join(f"{one.id} ({one.name})" for one in left)
        return f"{len(left)} job(s) not finished after {timeout:g}s: {names}"
    return f"not finished after {timeout:g}s: {', '.join(map(str, left))}"


def look(client: Client, waited: Waited) -> Ended | None:
    """How ``waited`` ended, or None while it has not: one ``GET`` of the job or of the
    sweep (then, once that has ended, its trials' Jobs: :func:`trial_jobs`)."""
    if waited.kind == "job":
        job = asked_job(client, waited.id)
        return Ended(waited, [job]) if job.get("state") in FINISHED_STATES else None
    sweep = client.sweep(waited.id)
    asked_for(sweep, "sweeps", waited.id)
    trials = trials_of(sweep, waited.id)
    if sweep.get("state") == "RUNNING":
        return None
    # a trial whose state the answer leaves out is judged by its Job below
    if any("state" in trial and trial["state"] not in FINISHED_STATES for trial in trials):
        return None
    jobs = trial_jobs(client, sweep)
    if any(job.get("state") not in FINISHED_STATES for job in jobs):
        return None
    return Ended(waited, jobs, sweep)


def trial_jobs(client: Client, sweep: dict[str, Any]) -> list[JobDict]:
    """The Jobs of ``sweep``'s trials (as ``GET /sweeps/{id}`` answered it), in trial
    order: read from ``GET /jobs`` listing the jobs named like its trials submitted since it
    was made (a request per 1,000), one ``GET /jobs/{id}`` each for any not found there."""
    ids = [str(trial["job_id"]) for trial in trials_of(sweep, str(sweep.get("id")))]
    wanted = set(ids)
    found: dict[str, JobDict] = {}
    if len(wanted) > 1:
        since = _seconds(sweep.get("created_at"))
        for job in client.iter_jobs(since=since, name=_trials_pattern(sweep, len(ids))):
            if job.get("id") in wanted:
                found[str(job["id"])] = job
                if len(found) == len(wanted):
                    break
    for job_id in ids:
        if job_id not in found:
            found[job_id] = asked_job(client, job_id)
    return [found[job_id] for job_id in ids]


def _seconds(value: Any) -> float | None:
    """``value``, a time in a reply, as a finite float; None when it is none: not a number,
    a bool (an int to Python: ``true`` was read as 1.0), NaN, infinite, or an integer past
    a float's range."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        seconds = float(value)
    except OverflowError:
        return None
    return seconds if math.isfinite(seconds) else None


def _trials_pattern(sweep: dict[str, Any], trials: int) -> str | None:
    """A name pattern that every trial job of ``sweep`` matches (their names are its name,
    cut to fit, then ``-N``: :func:`~danlu.core.sweep.trial_name`); None without a name."""
    name, total = sweep.get("name"), sweep.get("total")
    if not isinstance(name, str) or not name:
        return None
    last = max(trials, total if isinstance(total, int) else 0)
    # the longest suffix cuts the name the most: what is left begins every trial's name
    return trial_name(name, last).removesuffix(f"-{last}") + "*"
