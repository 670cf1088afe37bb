"""A control plane's claim on its Ray cluster: one danlu plane hands out a cluster's GPUs.

Two ``danlu server --executor ray`` planes of different homes that join one Ray cluster would
each take all of its GPUs for its own and start jobs onto the same GPUs, which then run out of
memory (one home is kept to one plane by its lock and the database's ``scheduler`` lease; two
homes share nothing but the cluster). So the executor of a plane claims the cluster as it
joins (:class:`ClusterClaim`), and a plane that finds the claim a live plane of another home's
is refused (:class:`ClusterClaimedError`, a :class:`~danlu.core.errors.ConfigError`:
``danlu server`` exits 2 naming the other plane's host, home, URL and since when).

- **What holds it.** A named actor in Ray's GCS (:data:`CLAIM_ACTOR` in the namespace
  :data:`CLAIM_NAMESPACE`, whatever the executor's own namespace), made by the plane's process
  (its Ray driver) and *not* detached: Ray ends an actor with the driver that owns it, so the
  claim goes when the plane's process does (a clean stop, ``kill -9``, its host lost), with
  nothing to renew and no clock to trust; the GCS refuses a second live actor of one name,
  so the name is the lock. It is pinned to the driver's own node, so that no other node's
  loss (an autoscaler's scale-down) ends it while the plane runs, and asks Ray for no CPU.
  Its class travels by value (:func:`holder_class`): that node's Ray workers need no danlu.
- **Whose it is.** The claim names its plane's home by a random id kept in the home
  (:func:`home_id`), not by its process: the same home's plane restarting, or a standby of
  the same database taking its ``scheduler`` lease over on the shared home, takes its own
  claim over (the old holder's actor killed) rather than be refused.
- **Stale.** A holder whose driver is gone leaves no actor: the name is free, the next plane
  takes it. One whose actor does not answer (its node lost, Ray not aware yet) is asked again
  for up to :data:`CLAIM_WAIT` seconds, within which Ray finds a lost node dead and ends it.
- **Looked at first.** A plane's start-up asks whether a live plane of another home holds the
  claim before it makes its home or its database (:meth:`ClusterClaim.check_unclaimed`, which
  claims nothing and writes nothing: :func:`probe_record`), so that a plane refused for it
  leaves nothing behind; the executor claims the cluster once the plane holds its database's
  lease, and may still be refused then by a plane that claimed it meanwhile.
- **Released** on a clean stop (:meth:`ClusterClaim.release`, by the executor's ``close``).
- **Kept.** At each reading of the inventory the executor asks its claim's actor
  (:meth:`ClusterClaim.check`): one that died under the running plane (its worker killed,
  by Ray's memory monitor say) is made again while the name is free; a claim another plane
  took meanwhile is logged as an error (both planes then hand out the GPUs: stop one).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from danlu.core.errors import ConfigError

log = logging.getLogger("danlu.executors.ray_executor")

CLAIM_ACTOR = "danlu.plane"
"""The name of the actor that holds a plane's claim on the Ray cluster (no run's actor is
named so: theirs are ``danlu.JOB_ID.ATTEMPT.RANK``)."""
CLAIM_NAMESPACE = "danlu"
"""The Ray namespace of :data:`CLAIM_ACTOR`: one for every plane, whatever namespace its runs'
actors live in (planes of two namespaces would share the GPUs all the same)."""
CLAIM_ID_FILE = "ray_claim_id"
"""The file of the executor's state directory (``{home}/executor``) that keeps the home's id,
by which its claim is known as its own (:func:`home_id`)."""
CLAIM_WAIT = 60.0
"""Seconds a plane that finds the claim held keeps asking a holder that does not answer (its
node lost: Ray ends its actor once its health checks find the node dead, 15 to 50 s with Ray's
defaults) before it is refused, and that its own claim's actor has to start in."""
ASK_TIMEOUT = 5.0
"""Seconds one ask of a claim's actor waits for its answer."""
CHECK_TIMEOUT = 2.0
"""Seconds the check of a running plane's own claim (:meth:`ClusterClaim.check`) waits for
its actor's answer: one that does not answer in time is asked again at the next check."""
RETRY_PAUSE = 0.2
"""Seconds between a starting plane's tries to take a claim that is being given up."""
_ID = re.compile(r"[0-9a-f]{32}")

_T = TypeVar("_T")


class GcsCall(Protocol):
    """The executor's way of making a call that Ray's GCS answers, with a deadline
    (:meth:`~danlu.executors.ray_executor.RayExecutor._gcs`)."""

    def __call__(self, what: str, call: Callable[[], _T]) -> _T: ...


@dataclass(frozen=True)
class ClaimRecord:
    """What a claim says of the plane that holds it."""

    id: str
    """Its home's id (:func:`home_id`): a claim of the same id is the same home's."""
    home: str
    host: str
    pid: int
    url: str | None
    """The URL its API serves and its jobs are told (None: not known)."""
    since: float
    """When it claimed the cluster (seconds since the epoch)."""

    def as_dict(self) -> dict[str, Any]:
        """The record as the claim's actor keeps it."""
        return asdict(self)

    @classmethod
    def read(cls, value: Any) -> ClaimRecord | None:
        """The record an actor answered, None when it is none (another program's actor of
        that name, or a damaged answer)."""
        if not isinstance(value, dict):
            return None
        texts = [value.get(key) for key in ("id", "home", "host")]
        url, pid, since = value.get("url"), value.get("pid"), value.get("since")
        if not all(isinstance(t, str) for t in texts) or not isinstance(url, str | None):
            return None
        if not isinstance(pid, int) or not isinstance(since, int | float):
            return None
        if isinstance(pid, bool) or isinstance(since, bool) or not math.isfinite(since):
            return None
        ident, home, host = (str(t) for t in texts)
        return cls(id=ident, home=home, host=host, pid=pid, url=url, since=float(since))

    def describe(self) -> str:
        """The plane for an operator: its home, host, process, URL and since when."""
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.since))
        url = self.url or "its URL not known"
        return f"the plane of home {self.home} on {self.host} (pid {self.pid}, {url}) since {when}"


class ClusterClaimedError(ConfigError):
    """A plane refused at start-up: the Ray cluster is claimed by a live plane of another home
    (``holder``: its record; None when its actor does not answer or says nothing readable)."""

    def __init__(self, message: str, holder: ClaimRecord | None = None) -> None:
        super().__init__(message)
        self.holder = holder


def holder_class() -> type:
    """The class of the claim's actor, made here so that Ray ships it by value (a class of a
    function's scope is pickled whole): the Python of the Ray workers of the control plane's
    node need not import danlu for the claim to hold. It keeps the claim's record and tells it
    (``claim()``)."""

    class ClusterClaimHolder:
        """A plane's claim on the Ray cluster, alive as long as the plane's process is."""

        def __init__(self, record: dict[str, Any]) -> None:
            self._record = dict(record)

        def claim(self) -> dict[str, Any]:
            """The claim's record (:class:`ClaimRecord`)."""
            return dict(self._record)

    return ClusterClaimHolder


def home_id(state_dir: Path) -> str:
    """The id of the home whose executor state is ``state_dir``: a random one, made once and
    kept in :data:`CLAIM_ID_FILE` (mode 0600); a damaged one is replaced (the claim of the
    old id, a live plane's, is then refused as another home's). Raises :class:`ConfigError`
    when it cannot be written."""
    path = state_dir / CLAIM_ID_FILE
    try:
        for _ in range(3):  # a file another process made between the read and the link: read it
            with contextlib.suppress(FileNotFoundError):
                text = path.read_text(encoding="ascii", errors="replace").strip()
                if _ID.fullmatch(text):
                    return text
                log.warning("%s is damaged (%r): a new id replaces it", path, text[:40])
                return _write_id(path, replace=True)
            with contextlib.suppress(FileExistsError):
                return _write_id(path, replace=False)
    except OSError as exc:
        raise ConfigError(
            f"cannot keep the home's id for its claim on the Ray cluster in {path}: "
            f"{exc.strerror or exc}; give a home this user can write"
        ) from None
    raise ConfigError(f"{path} keeps changing; is another control plane starting on this home?")


def kept_home_id(state_dir: Path) -> str | None:
    """The id :func:`home_id` keeps in ``state_dir``, read only: None where none is kept (a
    home not made yet) or it is damaged (:func:`home_id` would replace it)."""
    try:
        text = (state_dir / CLAIM_ID_FILE).read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None
    return text if _ID.fullmatch(text) else None


def _write_id(path: Path, *, replace: bool) -> str:
    """Write a new id at ``path`` whole (over the file there when ``replace``, else only where
    none is: :class:`FileExistsError`)."""
    new = secrets.token_hex(16)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(new + "\n")
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return new


@dataclass(frozen=True)
class _Seen:
    """The claim's holder as one look at it found it."""

    actor: Any | None
    """Its actor (None: no actor has the name now)."""
    record: ClaimRecord | None
    """What it answered (None: no answer, or none readable)."""
    answered: bool
    """Whether it answered (with a record or not)."""


class ClusterClaim:
    """The claim of one plane (``record``) on the Ray cluster, through the ``ray`` module and
    the executor's ``gcs`` calls (see the module's docstring). ``address`` is the cluster's,
    as the plane was given it (for the refusal's words); ``wait`` is :data:`CLAIM_WAIT` unless
    given."""

    def __init__(
        self,
        ray: Any,
        record: ClaimRecord,
        gcs: GcsCall,
        *,
        address: str | None = None,
        wait: float | None = None,
    ) -> None:
        self._ray = ray
        self.record = record
        self._gcs = gcs
        self._address = address
        self._wait = CLAIM_WAIT if wait is None else wait
        errors = ray.exceptions
        unavailable = getattr(errors, "ActorUnavailableError", None)  # Ray >= 2.22
        self._silent: tuple[type[Exception], ...] = (
            errors.GetTimeoutError,
            *((unavailable,) if unavailable is not None else ()),
        )
        """An ask's errors that mean no answer for now (the holder may yet answer)."""
        out_of_memory = getattr(errors, "OutOfMemoryError", None)
        self._dead: tuple[type[Exception], ...] = (
            errors.RayActorError,
            *((out_of_memory,) if out_of_memory is not None else ()),
        )
        """An ask's errors that mean the actor is gone (its driver or node gone, killed)."""
        self._holder = ray.remote(holder_class())
        """The claim's actor class, as Ray made it (once: Ray ships each class it is given)."""
        self._handle: Any | None = None
        self._lost_to: tuple[ClaimRecord | None] | None = None
        """The holder (None: one that said nothing readable) last logged as holding the claim
        this plane lost (:meth:`check`); None while none has been."""

    @property
    def held(self) -> bool:
        """Whether this plane has made its claim (and not given it back)."""
        return self._handle is not None

    def take(self) -> None:
        """Claim the cluster for this plane: the name free (no claim, or one whose driver is
        gone), or held by this plane's own home (taken over). Raises
        :class:`ClusterClaimedError` while a live plane of another home holds it (or a holder
        that has not answered for :data:`CLAIM_WAIT` seconds), :class:`ConfigError` when the
        claim's actor cannot start, and an
        :class:`~danlu.executors.errors.ExecutorUnavailableError` when Ray's GCS does not
        answer."""
        deadline = time.monotonic() + self._wait
        while True:
            handle = self._create()
            if handle is not None:
                self._confirm(handle, deadline)
                self._handle = handle
                return
            seen = self._look()
            if seen.record is not None and seen.record.id == self.record.id:
                log.info(
                    "taking this home's claim on the Ray cluster over from %s",
                    seen.record.describe(),
                )
                self._kill(seen.actor)
            elif seen.answered:
                raise ClusterClaimedError(self._claimed(seen.record, answered=True), seen.record)
            if time.monotonic() >= deadline:
                raise ClusterClaimedError(self._claimed(None, answered=False), None)
            time.sleep(RETRY_PAUSE)  # a claim being given up (its actor dying): asked again

    def check_unclaimed(self) -> None:
        """Raise :class:`ClusterClaimedError` as :meth:`take` would while a live plane of
        another home holds the claim (or a holder that does not answer for the wait), claiming
        nothing: a plane's start-up asks before it makes its home. A claim of this plane's own
        home, or none (or one being given up), passes: :meth:`take` claims it once the plane
        holds its database's lease. Raises an
        :class:`~danlu.executors.errors.ExecutorUnavailableError` when Ray's GCS does not
        answer."""
        deadline = time.monotonic() + self._wait
        while True:
            seen = self._look()
            if seen.record is not None and seen.record.id == self.record.id:
                return  # this home's: taken over once this plane holds the database's lease
            if seen.answered:
                raise ClusterClaimedError(self._claimed(seen.record, answered=True), seen.record)
            if seen.actor is None:
                return  # free, or its driver gone
            if time.monotonic() >= deadline:
                raise ClusterClaimedError(self._claimed(None, answered=False), None)
            time.sleep(RETRY_PAUSE)  # a holder that does not answer (its node lost): again

    def check(self) -> None:
        """Ask this plane's claim's actor that it still holds the claim; one that died (its
        worker killed) is made again while the name is free, and a claim another plane took
        meanwhile is logged (an error where that plane is another home's: both hand out the
        GPUs). One that does not answer within
        :data:`CHECK_TIMEOUT`, or a Ray that cannot be asked, is left to the next check."""
        handle = self._handle
        if handle is None:
            return
        try:
            self._ray.get(handle.claim.remote(), timeout=CHECK_TIMEOUT)
            return
        except self._silent:
            return
        except self._dead as exc:
            if self._lost_to is None:  # else said: another plane holds it
                log.warning(
                    "this plane's claim on the Ray cluster was lost (%s): claiming it again", exc
                )
        except Exception as exc:  # Ray cannot be asked now
            log.debug("cannot check the claim on the Ray cluster: %s", exc)
            return
        try:
            made = self._create()
            if made is not None:
                self._handle = made
                self._lost_to = None
                return
            seen = self._look()
        except Exception as exc:  # Ray cannot be asked now: at the next check
            log.debug("cannot claim the Ray cluster again: %s", exc)
            return
        if not seen.answered or self._lost_to == (seen.record,):
            return
        self._lost_to = (seen.record,)
        if seen.record is not None and seen.record.id == self.record.id:
            log.warning(
                "this plane's claim on the Ray cluster was taken over by %s, a plane of this "
                "home (a standby that took the database's scheduler lease over, or a restart)",
                seen.record.describe(),
            )
        else:
            holder = seen.record.describe() if seen.record is not None else "another program"
            log.error(
                "this plane's claim on the Ray cluster was lost and %s holds it now: both "
                "planes hand out the cluster's GPUs; stop one of them",
                holder,
            )

    def release(self) -> None:
        """Give the claim back (a clean stop): the next plane takes it at once. A Ray that
        cannot be asked is logged: the claim goes with this process anyway."""
        handle, self._handle = self._handle, None
        if handle is None:
            return
        try:
            self._kill(handle)
        except Exception as exc:
            log.warning(
                "cannot give the claim on the Ray cluster back (%s): it ends with this process", exc
            )

    # -- internals ----------------------------------------------------------------------------

    def _create(self) -> Any | None:
        """The claim's actor made for this plane, None when the name is taken."""
        options: dict[str, Any] = {
            "name": CLAIM_ACTOR,
            "namespace": CLAIM_NAMESPACE,
            "num_cpus": 0,
            "max_restarts": 0,
        }
        node = self._own_node()
        if node is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=False)
        maker = self._holder.options(**options)
        try:
            return self._gcs("claim the Ray cluster", lambda: maker.remote(self.record.as_dict()))
        except ValueError:  # Ray's "The name ... is already taken"
            return None

    def _own_node(self) -> str | None:
        """The Ray node id of this process's node (None: this Ray does not tell)."""
        try:
            node = self._ray.get_runtime_context().get_node_id()
        except Exception:  # an older Ray: the claim's actor goes where Ray puts it
            return None
        return node if isinstance(node, str) and node else None

    def _confirm(self, handle: Any, deadline: float) -> None:
        """Wait until the claim's new actor answers (it holds the name once made; one whose
        start failed would have let the name go at once). Raises :class:`ConfigError` when
        it died or has not answered by ``deadline``."""
        try:
            answer = self._ray.get(
                handle.claim.remote(), timeout=max(deadline - time.monotonic(), ASK_TIMEOUT)
            )
            if ClaimRecord.read(answer) is not None:
                return
            why = f"it answered {answer!r}"
        except Exception as exc:
            why = f"{type(exc).__name__}: {exc}"
        with contextlib.suppress(Exception):
            self._kill(handle)
        raise ConfigError(
            f"cannot claim the Ray cluster for this plane: the claim's actor ({CLAIM_ACTOR}, "
            f"namespace {CLAIM_NAMESPACE}) did not start on this host's Ray node ({why}); "
            "check that Ray runs actors on this host (ray status)"
        )

    def _look(self) -> _Seen:
        """The claim's holder: its actor and what it answers."""
        try:
            actor = self._gcs(
                "look up the claim on the Ray cluster",
                lambda: self._ray.get_actor(CLAIM_ACTOR, namespace=CLAIM_NAMESPACE),
            )
        except ValueError:  # gone since: its driver ended
            return _Seen(None, None, answered=False)
        try:
            answer = self._ray.get(actor.claim.remote(), timeout=ASK_TIMEOUT)
        except self._silent:
            return _Seen(actor, None, answered=False)
        except self._dead:  # dying: its driver ended
            return _Seen(None, None, answered=False)
        except Exception as exc:  # another program's actor of that name
            log.warning("the actor %s says no claim: %s", CLAIM_ACTOR, exc)
            return _Seen(actor, None, answered=True)
        return _Seen(actor, ClaimRecord.read(answer), answered=True)

    def _kill(self, actor: Any) -> None:
        if actor is not None:
            self._gcs(
                "end a claim on the Ray cluster",
                lambda: self._ray.kill(actor, no_restart=True),
            )

    def _claimed(self, holder: ClaimRecord | None, *, answered: bool) -> str:
        """The refusal of a start-up that found the cluster claimed by ``holder`` (None:
        a holder that did not answer, or, ``answered``, said nothing readable)."""
        where = f"the Ray cluster at {self._address}" if self._address else "the Ray cluster"
        if holder is None:
            said = "which says nothing readable of itself" if answered else ""
            said = said or f"which did not say which within {self._wait:g} s"
            return (
                f"{where} is claimed by another control plane (Ray actor {CLAIM_ACTOR}, "
                f"namespace {CLAIM_NAMESPACE}), {said}: two planes would both hand out its "
                "GPUs. Stop that plane, or try again once Ray has found its node gone; if no "
                "danlu plane runs on this cluster, kill that actor "
                f"(ray.kill(ray.get_actor('{CLAIM_ACTOR}', namespace='{CLAIM_NAMESPACE}')))"
            )
        url = f" (--url {holder.url}, DANLU_URL)" if holder.url else ""
        return (
            f"{where} is held by another danlu control plane: {holder.describe()}; two planes "
            "would both hand out its GPUs and start jobs onto the same ones. Submit to that "
            f"plane{url}, or stop it (its claim ends with its process) and start this one again"
        )


def claim_record(home: str | Path, state_dir: Path, url: str | None, since: float) -> ClaimRecord:
    """The claim of the plane of ``home`` (its executor's state in ``state_dir``), whose API
    serves at ``url``, made at ``since``, by this process on this host."""
    return ClaimRecord(
        id=home_id(state_dir),
        home=str(Path(home).resolve()),
        host=socket.gethostname(),
        pid=os.getpid(),
        url=url,
        since=since,
    )


def probe_record(home: str | Path, state_dir: Path) -> ClaimRecord:
    """The claim the plane of ``home`` would make (:func:`claim_record`), for a look at the
    cluster's claim (:meth:`ClusterClaim.check_unclaimed`) before anything is made: its id the
    one kept in ``state_dir`` (:func:`kept_home_id`), or a new one, written nowhere, where none
    is (a home not made yet, or a damaged id, is no holder's)."""
    return ClaimRecord(
        id=kept_home_id(state_dir) or secrets.token_hex(16),
        home=str(Path(home).resolve()),
        host=socket.gethostname(),
        pid=os.getpid(),
        url=None,
        since=time.time(),
    )
