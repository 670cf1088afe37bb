"""What danlu makes of the nodes Ray lists (``ray.nodes()``), their names and their GPUs, and
whether the head's GCS answers at all before the control plane joins the cluster
(:func:`check_head_reachable`; :func:`check_ray_address`, before ``danlu server`` makes its
home), and Ray's calls that may block made in a thread with a deadline
(:func:`call_in_thread`).

- **Name.** A node's ``danlu.node`` label (:data:`NODE_LABEL`), else Ray's ``NodeName`` (its
  address).
- **GPU type.** Ray's ``accelerator_type:NAME`` resources, of the names danlu knows
  (:func:`~danlu.core.cluster.gpu_type`, with Ray's sized names ``A100-40G``/``A100-80G``):
  a type with its memory size wins over a model named without one, as Ray names an A100 of
  either size ``A100`` and leaves the sized name to the operator
  (``ray start --resources='{"accelerator_type:A100-40G": 1}'``); a model named only without
  its size is the executor's default type where that is one of its sizes, else its largest
  (:func:`~danlu.core.cluster.listed_gpu_type`), and a node naming none the default type.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from danlu.core.cluster import GPU_SIZES, GpuType, Node, listed_gpu_type
from danlu.core.errors import UnknownNameError
from danlu.executors.errors import ExecutorError, ExecutorUnavailableError

NODE_LABEL = "danlu.node"
"""The Ray node label that names a node for danlu."""
_ACCELERATOR = "accelerator_type:"
_RAY_SIZES = {"a100-40g": "A100-40GB", "a100-80g": "A100-80GB"}
"""Ray's names of GPU models' sizes (``ray.util.accelerators``) that danlu spells otherwise."""
JOIN_TIMEOUT = 10.0
"""Seconds the Ray head's GCS may take to take a connection and to answer a request before
the executor joins the cluster (:func:`check_head_reachable`)."""
RAY_NEEDED = "DANLU_EXECUTOR=ray needs Ray on the control plane's host: pip install 'danlu[ray]'"
"""The refusal of a Ray plane's start-up on a host where ``import ray`` fails."""

_T = TypeVar("_T")


def node_name(info: Mapping[str, Any]) -> str:
    """A Ray node's danlu name: its ``danlu.node`` label, else Ray's ``NodeName``."""
    return str((info.get("Labels") or {}).get(NODE_LABEL) or info.get("NodeName", ""))


def shared_name(name: str) -> str:
    """The error of two Ray nodes named ``name``, with the fix."""
    return (
        f"two Ray nodes are both named {name!r}; give each a label of its own, "
        f'e.g. ray start --labels=\'{{"{NODE_LABEL}": "gpu07"}}\''
    )


def node_gpu_type(resources: Mapping[str, Any], default: GpuType) -> GpuType:
    """The GPU type a Ray node's ``resources`` name (see the module's docstring)."""
    sized: GpuType | None = None
    unsized: GpuType | None = None
    for key in resources:
        if not key.startswith(_ACCELERATOR):
            continue
        name = key[len(_ACCELERATOR) :]
        with contextlib.suppress(UnknownNameError):
            kind = listed_gpu_type(_RAY_SIZES.get(name.lower(), name), default)
            if name.lower() in GPU_SIZES:
                unsized = unsized or kind
            else:
                sized = sized or kind
    return sized or unsized or default


def ray_node(info: Mapping[str, Any], default: GpuType) -> Node:
    """The danlu node of a Ray node's listing ``info``; ``default`` is the type of GPUs whose
    node names none danlu knows."""
    resources = info.get("Resources", {})
    return Node(
        node_name(info),
        int(float(resources.get("GPU", 0))),
        node_gpu_type(resources, default),
        cpu_milli=int(float(resources.get("CPU", 0)) * 1000),
        memory=int(float(resources.get("memory", 0))),
    )


def call_in_thread(
    call: Callable[[], _T], timeout: float, name: str = "danlu-ray-gcs"
) -> tuple[threading.Thread, Callable[[], _T]]:
    """Start ``call()`` in a daemon thread of its own and wait up to ``timeout`` seconds for it
    to return: Ray blocks some calls (those its GCS answers) while the GCS is unreachable, and
    they cannot be interrupted. Returns the thread, still alive when the call has not
    returned (it is left to finish), and a function to call once it has ended, which returns
    what ``call`` returned or raises what it raised."""
    outcome: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as exc:  # handed to the caller
            outcome.append((False, exc))

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    thread.join(timeout)

    def result() -> _T:
        returned, value = outcome[0]
        if not returned:
            raise value
        return value  # type: ignore[no-any-return]

    return thread, result


def check_head_reachable(ray: Any, address: str | None, timeout: float) -> None:
    """Raise :class:`~danlu.executors.errors.ExecutorUnavailableError` unless a Ray GCS answers
    at the address that joining ``address`` would use within ``timeout`` seconds: nothing
    takes a TCP connection there, or something does (another service on that port, a head
    whose GCS hangs) but does not answer a GCS's request. Ray itself would retry joining for
    many minutes (some 40 s a try), the control plane's API not up meanwhile. ``auto`` when
    Ray finds no cluster of this host's to join, and an address that is no ``HOST:PORT``
    (Ray's ``ValueError``, which joining raised as it is), are refused too, with Ray's
    words. None (a local cluster is started) and a Ray client's address (``ray://``) are
    left to Ray."""
    if address is None or address.startswith("ray://"):
        return
    deadline = time.monotonic() + timeout
    try:
        target = ray._private.services.canonicalize_bootstrap_address(address)
    except ConnectionError as exc:  # auto: no cluster found (as joining would say)
        raise ExecutorUnavailableError(f"cannot join the Ray cluster: {exc}") from None
    except ValueError as exc:  # not HOST:PORT (joining raised Ray's ValueError as it was)
        raise ExecutorError(
            f"{address!r} is no Ray address ({exc}): give the head's HOST:PORT "
            "(ray start --head prints it), or auto"
        ) from None
    except Exception:  # not this Ray's API: left to Ray
        return
    try:
        host, port = target.rsplit(":", 1)
        where = (host.strip("[]"), int(port))
        client: Callable[..., Any] = ray._raylet.GcsClient
    except Exception:  # none to be found (a local cluster is started), or not this Ray's API
        return
    shown = target if target == address else f"{address} (joined as {target})"
    if why := _unconnected(where, timeout):
        raise ExecutorUnavailableError(
            f"nothing answers at the Ray head's GCS address ({shown}: {why}); is the head up "
            "and the address right?"
        )
    # the request Ray makes to see that a GCS is alive (ray._private.node), in a thread: Ray's
    # client retries for many minutes. One not answered in time is left to Ray's retries.
    thread, answer = call_in_thread(
        lambda: client(address=target).internal_kv_get(b"danlu-probe", None),
        max(deadline - time.monotonic(), 0.0),
        "danlu-ray-join",
    )
    why = f" within {timeout:g} s" if thread.is_alive() else ""
    if not why:
        try:
            answer()
        except Exception as exc:
            why = f" ({type(exc).__name__}: {exc})"
    if why:
        raise ExecutorUnavailableError(
            f"nothing answers as a Ray GCS at {shown}{why}; is it the Ray head's GCS address "
            "(ray start --head prints it), and the head up?"
        )


def check_ray_address(address: str | None, timeout: float = JOIN_TIMEOUT) -> None:
    """:func:`check_head_reachable` for ``address`` with no executor made and no cluster joined
    or started: ``danlu server --executor ray`` asks before it makes its home
    (:func:`danlu.server.main.check_cluster`), as the executor asks again as it joins. Raises
    :class:`~danlu.executors.errors.ExecutorError`; nothing when Ray is not installed here
    (the start-up refuses that first, with the fix: :data:`RAY_NEEDED`)."""
    try:
        import ray
    except ImportError:
        return
    check_head_reachable(ray, address, timeout)


def _unconnected(where: tuple[str, int], timeout: float) -> str:
    """Why no TCP connection to ``where`` could be made within ``timeout`` seconds; empty when
    one could."""
    try:
        socket.create_connection(where, timeout=timeout).close()
    except TimeoutError:
        return f"no answer within {timeout:g} s"
    except OSError as exc:
        return exc.strerror or str(exc)
    return ""
