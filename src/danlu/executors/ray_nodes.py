"""What danlu makes of the nodes Ray lists (``ray.nodes()``), their names and their GPUs, and
whether the head's GCS answers at all before the control plane joins the cluster.

- **Name.** A node's ``danlu.node`` label (:data:`NODE_LABEL`), else Ray's ``NodeName`` (its
  address).
- **GPU type.** Ray's ``accelerator_type:NAME`` resources, of the names danlu knows
  (:func:`~danlu.core.cluster.gpu_type`, with Ray's sized names ``A100-40G``/``A100-80G``):
  a type with its memory size wins over a model named without one, as Ray names an A100 of
  either size ``A100`` and leaves the sized name to the operator
  (``ray start --resources='{"accelerator_type:A100-40G": 1}'``); a model named only without
  its size is its largest, and a node naming none the executor's default type.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Mapping
from typing import Any

from danlu.core.cluster import GPU_SIZES, GpuType, Node, gpu_type
from danlu.core.errors import UnknownNameError
from danlu.executors.errors import ExecutorUnavailableError

NODE_LABEL = "danlu.node"
"""The Ray node label that names a node for danlu."""
_ACCELERATOR = "accelerator_type:"
_RAY_SIZES = {"a100-40g": "A100-40GB", "a100-80g": "A100-80GB"}
"""Ray's names of GPU models' sizes (``ray.util.accelerators``) that danlu spells otherwise."""


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
            kind = gpu_type(_RAY_SIZES.get(name.lower(), name))
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


def check_head_reachable(ray: Any, address: str | None, timeout: float) -> None:
    """Raise :class:`~danlu.executors.errors.ExecutorUnavailableError` when nothing takes a
    TCP connection at the GCS address that joining ``address`` would use within ``timeout``
    seconds: Ray would retry for many minutes (about 20 tries of some 40 s each) before it
    failed. An address Ray cannot resolve here (none: a local cluster is started; ``ray://``)
    is left to Ray."""
    if address is None or address.startswith("ray://"):
        return
    try:
        target = ray._private.services.canonicalize_bootstrap_address(address)
        host, port = target.rsplit(":", 1)
        where = (host.strip("[]"), int(port))
    except Exception:  # none to be found (Ray says so itself), or not this Ray's API
        return
    try:
        socket.create_connection(where, timeout=timeout).close()
    except TimeoutError:
        why = f"no answer within {timeout:g} s"
    except OSError as exc:
        why = exc.strerror or str(exc)
    else:
        return
    shown = target if target == address else f"{address}, {target}"
    raise ExecutorUnavailableError(
        f"nothing answers at the Ray head's GCS address ({shown}: {why}); is the head up "
        "and the address right?"
    )
