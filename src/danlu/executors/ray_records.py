"""The Ray executor's launch record (:class:`~danlu.executors.ray_executor.RayExecutor`): the
fields it adds to :data:`danlu.executors.records.LAUNCH_FIELDS`, and the names of a run's
actors, which the executor derives from the run (:func:`run_actors`) rather than trusts from
the record (:func:`own_actors`), and the GPUs of a run whose record cannot be read, as its
actors tell them (:func:`placed_gpus`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from danlu.core.cluster import Cluster
from danlu.executors import records, supervise
from danlu.executors.base import HeldGpus
from danlu.executors.errors import ExecutorError


def _unsignalled(value: Any) -> bool:
    """A stop Ray could not deliver to some actors: ``{"actors", "reason", "grace", "at"}``
    (a stop reason, a finite grace and time: the executor records an endless grace as
    :data:`~danlu.executors.supervise.MAX_GRACE_SECONDS`)."""
    return (
        isinstance(value, dict)
        and isinstance(value.get("actors"), list)
        and all(isinstance(n, str) for n in value["actors"])
        and records.STOP_FIELDS["reason"](value.get("reason"))
        and all(records.STOP_FIELDS["grace"](value.get(k)) for k in ("grace", "at"))
    )


def _names(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(n, str) for n in value)


def _natural(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _actor_ids(value: Any) -> bool:
    """Ray's ids of the run's actors, by rank: hex strings (Ray's ``ActorID.hex()``)."""
    return _names(value) and all(
        0 < len(v) <= 128 and all(c in "0123456789abcdef" for c in v) for v in value
    )


LAUNCH_FIELDS: Mapping[str, records.Check] = {
    **records.LAUNCH_FIELDS,
    "actors": lambda v: _names(v) and bool(v),
    "nodes": _names,
    "answered": lambda v: isinstance(v, bool),
    "gang_stopped": lambda v: isinstance(v, bool),
    "offsets": lambda v: isinstance(v, list) and all(map(_natural, v)),
    "unsignalled": _unsignalled,
    "open_line": _natural,
    "actor_ids": _actor_ids,
    "log_max_bytes": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
}
"""The Ray executor's launch record: the local one's, its actors' and nodes' names (and Ray's
ids of its actors, ``actor_ids``, by which Ray's record of a dead one is read: its death's
cause), how far the actors' output was read, and the cap on the job's log
(``log_max_bytes``: :func:`~danlu.executors.ray_output.append_run_output`)."""


def actor_id(handle: Any) -> str | None:
    """Ray's id of the actor of ``handle`` (its ``ActorID`` in hex), None where the handle
    does not tell it (another Ray's handles)."""
    try:
        hexed = handle._actor_id.hex()
    except Exception:  # any Ray's handle (or none): no id is no id
        return None
    return hexed if isinstance(hexed, str) and _actor_ids([hexed]) else None


def run_actors(job_id: str, attempt: int, count: int) -> list[str]:
    """The names of the ``count`` actors of run ``attempt`` of job ``job_id`` (one a node)."""
    return [f"danlu.{job_id}.{attempt}.{rank}" for rank in range(count)]


def read_offsets(run_dir: Path, launch: Mapping[str, Any]) -> list[int]:
    """How far each actor's output has been read into the job's log (``offsets``, by rank
    as ``actors``; 0 each before any was). Raises :class:`ExecutorError` when the record
    of the run in ``run_dir`` lists another number of them than of actors: each answer
    would be taken for another node's, or an actor left unasked (the run taken as ended
    while it runs)."""
    actors = launch["actors"]
    offsets = launch.get("offsets") or [0] * len(actors)
    if len(offsets) != len(actors):
        raise ExecutorError(
            f"the launch record {run_dir / supervise.LAUNCH} lists {len(offsets)} output "
            f'offsets for {len(actors)} Ray actors: remove its "offsets" field (the '
            "actors' output is then appended to the job's log again from its start)"
        )
    return list(offsets)


def own_actors(launch: dict[str, Any]) -> dict[str, Any] | None:
    """``launch``, a checked launch record, when the actors it names are its run's own
    (:func:`run_actors`), else None (the record is damaged: its polls, stops and clean-up
    would reach another run's actors, stopping and killing them); a stop not yet delivered
    (``unsignalled``) that names others is dropped."""
    actors = launch["actors"]
    if actors != run_actors(launch["job_id"], launch["attempt"], len(actors)):
        return None
    pending = launch.get("unsignalled")
    if pending is not None and not set(pending["actors"]) <= set(actors):
        del launch["unsignalled"]
    return launch


def job_actors(listed: Iterable[Any], job_id: str, namespace: str) -> list[str]:
    """The names of the actors of any run of job ``job_id`` in ``namespace`` among
    ``listed`` (what ``ray.util.list_named_actors(all_namespaces=True)`` returns: the live
    named actors, each ``{"name", "namespace"}``), named as :func:`run_actors` names them
    (``danlu.JOB_ID.ATTEMPT.RANK``: another job's, ``JOB_ID.x``'s say, is not one)."""
    prefix = f"danlu.{job_id}."
    found = []
    for entry in listed:
        name = entry.get("name") if isinstance(entry, Mapping) else None
        if not isinstance(name, str) or entry.get("namespace") != namespace:
            continue
        attempt, dot, rank = name[len(prefix) :].partition(".")
        numbers = (attempt, rank)
        if name.startswith(prefix) and dot and all(n.isascii() and n.isdecimal() for n in numbers):
            found.append(name)
    return sorted(found)


def placed_gpus(
    job_id: str, placements: Iterable[Any], cluster: Cluster, stopping: bool
) -> HeldGpus | None:
    """The GPUs of ``cluster`` held by a run of job ``job_id`` whose launch record cannot be
    read, from what each of its live actors tells of itself
    (:meth:`~danlu.executors.ray_actor.NodeRun.placement`: its node's name and the
    ``CUDA_VISIBLE_DEVICES`` it was given); held whole unless one holds memory shares. An
    actor on a node no longer in ``cluster`` holds none of its GPUs (nothing is launched
    there). None (the run's GPUs not known: every GPU is held) when an answer is not such a
    placement, names GPUs without a node, or names a device that is no GPU of its node."""
    index = {node.name: n for n, node in enumerate(cluster.nodes)}
    gpus: list[tuple[int, int]] = []
    shared = False
    for placement in placements:
        if not isinstance(placement, Mapping):
            return None
        node, visible = placement.get("node"), placement.get("visible")
        if not isinstance(visible, str) or not (node is None or isinstance(node, str)):
            return None
        devices = [entry.strip() for entry in visible.split(",") if entry.strip()]
        if not devices:
            continue
        if node is None:
            return None
        if node not in index:
            continue
        n = index[node]
        for device in devices:
            if (
                not (device.isascii() and device.isdecimal())
                or int(device) >= cluster.nodes[n].gpus
            ):
                return None
            gpus.append((n, int(device)))
        shared = shared or placement.get("shared") is True
    return HeldGpus(job_id, sorted(set(gpus)), shared, stopping)
