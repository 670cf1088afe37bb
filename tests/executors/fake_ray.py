"""A fake of the parts of the ``ray`` API that the Ray executor uses, for unit tests of
:class:`~danlu.executors.ray_executor.RayExecutor` without a Ray cluster.

For tests only: it is no Ray. :meth:`FakeRay.install` puts a ``ray`` package of its own
(``ray``, ``ray.exceptions``, ``ray.util.scheduling_strategies``) into ``sys.modules``
through pytest's ``monkeypatch`` (undone after the test), so that the executor's
``import ray`` gets it; Ray itself need not be installed. What it fakes:

- ``ray.nodes()``: :attr:`FakeRay.nodes`, dicts as Ray lists them (:func:`node`).
- ``ray.remote(cls).options(name=...).remote(*args)``: an actor whose object is ``cls(*args)``
  made in this process (the executor's :class:`~danlu.executors.ray_actor.NodeRun`: the
  job's commands are real child processes). A constructor that raises leaves a dead actor,
  as Ray does. A name a live actor has is refused (``ValueError``).
- ``actor.method.remote(...)``: the call is made at once; its answer or error is kept in the
  returned reference for ``ray.get``. An error of the method comes as a ``RayTaskError``.
- ``ray.get_actor(name)``: the live actor of that name, else ``ValueError`` as Ray's.
- ``ray._private.state.actors(actor_id=ID)``: the GCS's record of an actor by its id (each
  actor's handle has one, ``handle._actor_id.hex()``), dead ones too: ``{"ActorID", "Name",
  "State", "DeathCause"}``, the cause a dict of the proto's field names (:meth:`FakeActor.
  death_cause`); ``{}`` for an id Ray does not know.
- ``ray.wait``, ``ray.get`` (``GetTimeoutError`` for a call that hangs), ``ray.kill``.
- ``ray.get_runtime_context().get_node_id()``: :attr:`FakeRay.node_id`, the node of this
  process (the driver's).
- ``ray.exceptions``: classes of Ray's names and hierarchy (``RayError`` >
  ``RayActorError`` > ``ActorDiedError`` / ``ActorUnavailableError``; ``GetTimeoutError``,
  also a ``TimeoutError``; ``ObjectLostError``; ``RayTaskError``; ``OutOfMemoryError``).

Faults a test makes: :meth:`FakeActor.dead` (its node lost: calls fail with
``ActorDiedError``, ``get_actor`` finds no such actor, its record's cause says its node
died), :meth:`FakeActor.memory_killed` (Ray's memory monitor killed it: calls fail with
``OutOfMemoryError``, ``get_actor`` finds no such actor, its record's cause is an
``oom_context``), :attr:`FakeActor.unavailable`
(calls fail with ``ActorUnavailableError``, as on a network blip), :attr:`FakeActor.hanging`
(calls never answer) and :meth:`FakeRay.fail` (the next calls of one API raise a given
error). :meth:`FakeRay.close_all` ends every actor's command (a test's teardown).
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Callable
from typing import Any

import pytest


class RayError(Exception):
    """``ray.exceptions.RayError``: every error of Ray's."""


class RayActorError(RayError):
    """``ray.exceptions.RayActorError``: a call to an actor failed for the actor's sake."""


class ActorDiedError(RayActorError):
    """``ray.exceptions.ActorDiedError``: the actor is dead (killed, its node lost, or its
    creation failed: ``actor_init_failed``, as Ray's)."""

    def __init__(self, message: str, actor_init_failed: bool = False) -> None:
        super().__init__(message)
        self.actor_init_failed = actor_init_failed


class ActorUnavailableError(RayActorError):
    """``ray.exceptions.ActorUnavailableError``: the actor cannot be reached for now (a
    network blip); it may answer later."""


class GetTimeoutError(RayError, TimeoutError):
    """``ray.exceptions.GetTimeoutError``: ``ray.get`` timed out."""


class ObjectLostError(RayError):
    """``ray.exceptions.ObjectLostError``: an answer was lost with the node that held it."""


class RayTaskError(RayError):
    """``ray.exceptions.RayTaskError``: the remote method raised."""


class OutOfMemoryError(RayError):
    """``ray.exceptions.OutOfMemoryError``: Ray's memory monitor killed the worker (its node
    ran low on host memory); every call to an actor it killed raises it (no
    ``RayActorError``)."""


EXCEPTIONS = (
    RayError,
    RayActorError,
    ActorDiedError,
    ActorUnavailableError,
    GetTimeoutError,
    ObjectLostError,
    RayTaskError,
    OutOfMemoryError,
)


def node(name: str, gpus: int = 4, address: str | None = None, **extra: Any) -> dict[str, Any]:
    """A live node with ``gpus`` GPUs as ``ray.nodes()`` lists it, labelled ``name`` for
    danlu; ``extra`` overrides fields (``NodeID``, ``Alive``...)."""
    address = address or f"10.0.0.{sum(map(ord, name)) % 250 + 1}"
    info = {
        "NodeID": f"id-{name}",
        "Alive": True,
        "NodeName": address,
        "NodeManagerAddress": address,
        "Labels": {"danlu.node": name},
        "Resources": {"GPU": float(gpus), "CPU": 8.0, "memory": 1e9},
    }
    info.update(extra)
    return info


class FakeRef:
    """What a remote call returned: its answer, its error, or nothing yet (``pending``)."""

    def __init__(self, value: Any = None, error: BaseException | None = None) -> None:
        self.value = value
        self.error = error
        self.pending = False


class FakeMethod:
    def __init__(self, actor: FakeActor, name: str) -> None:
        self._actor = actor
        self._name = name

    def remote(self, *args: Any, **kwargs: Any) -> FakeRef:
        actor = self._actor
        actor.ray.check(f"{self._name}.remote")
        actor.ray.calls.append((actor.name, self._name, args))
        if actor.init_error is not None:  # as Ray words it: its cause on the last line
            error = actor.init_error
            return FakeRef(
                error=ActorDiedError(
                    "The actor died because of an error raised in its creation task, "
                    f"\x1b[36mray::{actor.name}:NodeRun.__init__()\x1b[39m\n"
                    f"          ^^^^^^^^\n{type(error).__name__}: {error}",
                    actor_init_failed=True,
                )
            )
        if actor.is_dead and actor.memory_said is not None:
            return FakeRef(error=OutOfMemoryError(actor.memory_said))
        if actor.is_dead:
            return FakeRef(error=ActorDiedError(f"the actor {actor.name} died"))
        if actor.unavailable:
            return FakeRef(error=ActorUnavailableError(f"the actor {actor.name} is unreachable"))
        if actor.hanging:
            ref = FakeRef()
            ref.pending = True
            return ref
        try:
            return FakeRef(getattr(actor.instance, self._name)(*args, **kwargs))
        except Exception as exc:
            return FakeRef(error=RayTaskError(f"{type(exc).__name__}: {exc}"))


class FakeActorId:
    """Ray's ``ActorID`` of an actor handle (``handle._actor_id``)."""

    def __init__(self, hexed: str) -> None:
        self._hex = hexed

    def hex(self) -> str:
        return self._hex


class FakeActor:
    """A named actor: the handle the executor calls methods of (``actor.status.remote()``),
    and the switches a test flips."""

    def __init__(self, ray: FakeRay, name: str, instance: Any, options: dict[str, Any]):
        self.ray = ray
        self.name = name
        self.instance = instance
        self.options = options
        self._actor_id = FakeActorId(f"{len(ray.by_id) + 1:032x}")
        ray.by_id[self._actor_id.hex()] = self
        self.is_dead = instance is None
        self.init_error: BaseException | None = None
        """What its creation raised (its calls then fail as Ray's do: ``actor_init_failed``)."""
        self.unavailable = False
        """Calls fail with ``ActorUnavailableError`` (as on a network blip)."""
        self.hanging = False
        """Calls never answer (``ray.wait`` leaves them pending, ``ray.get`` times out)."""
        self.memory_said: str | None = None
        """Ray's account of the memory monitor's kill of the actor (:meth:`memory_killed`)."""

    def dead(self) -> None:
        """The actor dies (its node lost): its command is ended, as Ray's end would."""
        self.is_dead = True
        if self.instance is not None:
            with contextlib.suppress(Exception):
                self.instance.close()

    def memory_killed(self, said: str) -> None:
        """Ray's memory monitor kills the actor (its node low on host memory): it dies, and
        its calls fail with ``OutOfMemoryError`` saying ``said``."""
        self.memory_said = said
        self.dead()

    def death_cause(self) -> dict[str, Any]:
        """The cause of its death as Ray's GCS keeps it (the ``ActorDeathCause`` proto's
        fields): Ray's memory monitor's account (``oom_context``, its message the text of
        the calls' ``OutOfMemoryError``), else its node's death; empty while it lives."""
        if not self.is_dead:
            return {}
        if self.memory_said is not None:
            return {"oom_context": {"error_message": self.memory_said}}
        return {
            "actor_died_error_context": {
                "error_message": "The actor died because its node has died.",
                "reason": "NODE_DIED",
            }
        }

    def __getattr__(self, name: str) -> FakeMethod:
        if name.startswith("_"):
            raise AttributeError(name)
        return FakeMethod(self, name)


class FakeActorClass:
    """``ray.remote(cls)``: actors of ``cls`` made by ``.options(...).remote(*args)``."""

    def __init__(self, ray: FakeRay, cls: type) -> None:
        self._ray = ray
        self._cls = cls

    def options(self, **options: Any) -> Any:
        ray, cls = self._ray, self._cls

        class Maker:
            def remote(self, *args: Any, **kwargs: Any) -> FakeActor:
                ray.check("actor.remote")
                name = options["name"]
                old = ray.actors.get(name)
                if old is not None and not old.is_dead:
                    raise ValueError(f"The name {name} is already taken")
                error: BaseException | None = ray.init_error
                instance = None
                if error is None:
                    try:
                        instance = cls(*args, **kwargs)
                    except Exception as exc:  # Ray makes the actor; it is dead, its calls fail
                        error = exc
                actor = FakeActor(ray, name, instance, options)
                actor.init_error = error
                ray.actors[name] = actor
                return actor

        return Maker()


class FakeRay:
    """The fake cluster: its nodes, its actors by name, and what was asked of it."""

    def __init__(self, nodes: list[dict[str, Any]] | None = None) -> None:
        self.nodes: list[dict[str, Any]] = list(nodes or [])
        self.actors: dict[str, FakeActor] = {}
        self.by_id: dict[str, FakeActor] = {}
        """Every actor made, live or dead, by its id (the GCS's actor table)."""
        self.calls: list[tuple[str, str, tuple[Any, ...]]] = []
        """``(actor, method, args)`` of every remote call made."""
        self.killed: list[str] = []
        """The names of the actors ``ray.kill`` killed, in order."""
        self._faults: dict[str, list[BaseException]] = {}
        self.init_error: BaseException | None = None
        """What the creation of every actor raises on its node from now on (danlu not
        importable there: ``ModuleNotFoundError``), None to create them."""
        self.node_id = "id-driver"
        """The Ray node id of this process's node (``get_runtime_context().get_node_id()``)."""

    # -- faults -------------------------------------------------------------------------------

    def fail(self, api: str, error: BaseException, times: int = 1) -> None:
        """Make the next ``times`` calls of ``api`` raise ``error``: ``nodes``,
        ``get_actor``, ``actors`` (the GCS's actor table), ``list_named_actors``, ``wait``,
        ``get``, ``kill``, ``actor.remote``
        (making an actor) or ``METHOD.remote`` (a call of an actor's method, e.g.
        ``close.remote``)."""
        self._faults.setdefault(api, []).extend([error] * times)

    def heal(self, api: str | None = None) -> None:
        """No more faults of ``api`` (of any API when None)."""
        if api is None:
            self._faults.clear()
        else:
            self._faults.pop(api, None)

    def check(self, api: str) -> None:
        """Raise the next fault made for ``api``, if any."""
        faults = self._faults.get(api)
        if faults:
            raise faults.pop(0)

    # -- ray's API ----------------------------------------------------------------------------

    def live(self, prefix: str = "") -> list[str]:
        """The names of the live actors whose names start with ``prefix``."""
        return sorted(n for n, a in self.actors.items() if n.startswith(prefix) and not a.is_dead)

    def close_all(self) -> None:
        """End every actor's command and remove its output folder."""
        for actor in self.actors.values():
            if actor.instance is not None:
                with contextlib.suppress(Exception):
                    actor.instance.close()

    def module(self) -> dict[str, types.ModuleType]:
        """The fake ``ray`` package's modules, by their names in ``sys.modules``."""
        ray = types.ModuleType("ray")
        ray.__doc__ = "A fake ray for unit tests (tests/executors/fake_ray.py)."
        api: dict[str, Callable[..., Any]] = {
            "is_initialized": lambda: True,
            "init": lambda **_: None,
            "remote": lambda cls: FakeActorClass(self, cls),
            "nodes": self._nodes,
            "get_actor": self._get_actor,
            "wait": self._wait,
            "get": self._get,
            "kill": self._kill,
            "get_runtime_context": lambda: types.SimpleNamespace(get_node_id=lambda: self.node_id),
        }
        for name, fn in api.items():
            setattr(ray, name, fn)
        exceptions = types.ModuleType("ray.exceptions")
        for cls in EXCEPTIONS:
            setattr(exceptions, cls.__name__, cls)
        util = types.ModuleType("ray.util")
        strategies = types.ModuleType("ray.util.scheduling_strategies")
        strategies.NodeAffinitySchedulingStrategy = NodeAffinitySchedulingStrategy  # type: ignore[attr-defined]
        ray.exceptions = exceptions  # type: ignore[attr-defined]
        ray.util = util  # type: ignore[attr-defined]
        util.list_named_actors = self._list_named_actors  # type: ignore[attr-defined]
        util.scheduling_strategies = strategies  # type: ignore[attr-defined]
        private = types.ModuleType("ray._private")
        state = types.ModuleType("ray._private.state")
        state.actors = self._actor_table  # type: ignore[attr-defined]
        private.state = state  # type: ignore[attr-defined]
        ray._private = private  # type: ignore[attr-defined]
        return {
            "ray": ray,
            "ray.exceptions": exceptions,
            "ray.util": util,
            "ray.util.scheduling_strategies": strategies,
            "ray._private": private,
            "ray._private.state": state,
        }

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FakeRay:
        """Make ``import ray`` (and its submodules the executor imports) give this fake until
        the test ends."""
        for name, module in self.module().items():
            monkeypatch.setitem(sys.modules, name, module)
        return self

    def _nodes(self) -> list[dict[str, Any]]:
        self.check("nodes")
        return [dict(n) for n in self.nodes]

    def _list_named_actors(self, all_namespaces: bool = False) -> list[Any]:
        """The live actors: ``{"name", "namespace"}`` each with ``all_namespaces``, else
        their names (``list_named_actors``)."""
        self.check("list_named_actors")
        live = [a for a in self.actors.values() if not a.is_dead]
        if not all_namespaces:
            return [a.name for a in live]
        return [{"name": a.name, "namespace": a.options.get("namespace")} for a in live]

    def _actor_table(self, actor_id: str | None = None) -> dict[str, Any]:
        """``ray._private.state.actors(actor_id=...)``: the record of one actor, dead or
        alive, as Ray's GCS keeps it; ``{}`` for an id it does not know."""
        self.check("actors")
        actor = self.by_id.get(actor_id or "")
        if actor is None:
            return {}
        return {
            "ActorID": actor_id,
            "Name": actor.name,
            "State": "DEAD" if actor.is_dead else "ALIVE",
            "DeathCause": actor.death_cause(),
        }

    def _get_actor(self, name: str, namespace: str | None = None) -> FakeActor:
        self.check("get_actor")
        actor = self.actors.get(name)
        if actor is None or actor.is_dead:
            raise ValueError(f"Failed to look up actor with name '{name}'")
        return actor

    def _wait(
        self, refs: list[FakeRef], num_returns: int = 1, timeout: float | None = None
    ) -> tuple[list[FakeRef], list[FakeRef]]:
        self.check("wait")
        return [r for r in refs if not r.pending], [r for r in refs if r.pending]

    def _get(self, ref: FakeRef, timeout: float | None = None) -> Any:
        self.check("get")
        if ref.pending:
            raise GetTimeoutError("Get timed out: some object(s) not ready")
        if ref.error is not None:
            raise ref.error
        return ref.value

    def _kill(self, actor: FakeActor, no_restart: bool = True) -> None:
        self.check("kill")
        self.killed.append(actor.name)
        actor.dead()


class NodeAffinitySchedulingStrategy:
    """``ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy``: kept, not used."""

    def __init__(self, node_id: str, soft: bool = False) -> None:
        self.node_id = node_id
        self.soft = soft
