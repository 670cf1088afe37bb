"""The local executor's GPUs at start-up: NVML's, fake ones given, or one fake GPU where this
host has no NVML at all.

A host without NVML (a laptop: ``nvidia-ml-py`` not installed, or no NVIDIA driver, whose
library ``libnvidia-ml.so.1`` NVML then cannot find) runs on :data:`FALLBACK_FAKE`, said at
start-up: README's first command relies on it. A host whose NVML is there but serves no GPU
(the kernel module and its library of different driver versions, the module not loaded, no
permission on ``/dev/nvidia*``, no GPU it can read, ``CUDA_VISIBLE_DEVICES`` hiding every
one) refuses to start, naming the cause and its fixes: a fake GPU there had jobs scheduled
onto a GPU that does not exist, and given the index of a real one."""

from __future__ import annotations

from collections.abc import Callable

from danlu.config import gpu_discovery_env
from danlu.core.errors import ConfigError
from danlu.devices import Inventory, discover, fake_inventory
from danlu.devices.errors import DeviceError, NvmlMissingError

FALLBACK_FAKE = "1x80GiB"
"""The fake inventory of a host without NVML."""


def find_inventory(fake_gpus: str | None, announce: Callable[[str], None]) -> Inventory:
    """NVML's GPUs (one NVML cannot read is left out: :func:`~danlu.devices.discover`), or
    the fake inventory ``fake_gpus``, or :data:`FALLBACK_FAKE` where this host has no NVML
    (:class:`~danlu.devices.errors.NvmlMissingError`); a fake inventory is announced
    through ``announce``. NVML that is there but serves no GPU is a :class:`ConfigError`
    naming why and the fixes (``--fake-gpus`` among them)."""
    if fake_gpus:
        inventory = fake_inventory(fake_gpus)
        announce(f"danlu: using FAKE GPUs from --fake-gpus {fake_gpus}: {inventory.describe()}")
        return inventory
    try:
        return discover(environ=gpu_discovery_env())
    except DeviceError as exc:
        if not isinstance(exc, NvmlMissingError):
            raise ConfigError(f"this host's GPUs cannot be used: {exc}") from None
        inventory = fake_inventory(FALLBACK_FAKE)
        announce(
            f"danlu: no GPUs found ({exc}).\n"
            f"danlu: using FAKE GPUs ({FALLBACK_FAKE}); jobs run on the CPU: "
            f"{inventory.describe()}"
        )
        return inventory
