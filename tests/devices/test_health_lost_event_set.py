"""Xid events after a GPU fell off the bus (a fake NVML module modelled on the driver's:
once a GPU of an event set is lost, every wait on the set answers ``GPU_IS_LOST`` at once).
The check read that as "no event left", every time, so no other GPU's Xid was ever
reported again: an NVLink error or a GSP timeout on another GPU left it open to new work.
The set is now made again without the lost GPU."""

from __future__ import annotations

import types
from typing import Any

from test_devices import _gpu, fake_nvml
from test_health import H100, _NvmlError

from danlu.devices import discover
from danlu.devices.health import GpuFault, NvmlHealthCheck

GiB = 1024**3
GPU_IS_LOST, TIMEOUT = 15, 10
LOST = "GPU is lost (fell off the bus): reset or reboot"


class _Driver:
    """NVML's event sets: each takes the Xid events of the GPUs registered to it since;
    waiting on one holding a lost GPU answers GPU_IS_LOST."""

    def __init__(self, gpus: list[dict[str, Any]]) -> None:
        self.gpus = gpus
        self.sets: dict[int, tuple[set[int], list[tuple[int, int]]]] = {}
        self.freed: list[int] = []

    def create(self) -> int:
        number = len(self.sets)
        self.sets[number] = (set(), [])
        return number

    def register(self, h: dict[str, Any], kinds: int, number: int) -> None:
        if h.get("lost"):
            raise _NvmlError(GPU_IS_LOST)
        self.sets[number][0].add(h["index"])

    def wait(self, number: int, timeout_ms: int) -> Any:
        registered, queue = self.sets[number]
        if any(self.gpus[i].get("lost") for i in registered):
            raise _NvmlError(GPU_IS_LOST)
        if not queue:
            raise _NvmlError(TIMEOUT)
        device, xid = queue.pop(0)
        return types.SimpleNamespace(device=self.gpus[device], eventType=8, eventData=xid)

    def xid(self, device: int, xid: int) -> None:
        """An Xid on GPU ``device``: queued in each live set it is registered to."""
        for number, (registered, queue) in self.sets.items():
            if device in registered and number not in self.freed:
                queue.append((device, xid))


def _nvml(gpus: list[dict[str, Any]], driver: _Driver) -> Any:
    nvml = fake_nvml(gpus)
    nvml.NVML_FEATURE_ENABLED = 1

    def handle(i: int) -> dict[str, Any]:
        if gpus[i].get("lost"):
            raise _NvmlError(GPU_IS_LOST)
        return gpus[i]

    nvml.nvmlDeviceGetHandleByIndex = handle
    nvml.nvmlDeviceGetRemappedRows = lambda h: (0, 0, 0, 0)
    nvml.nvmlDeviceGetRetiredPagesPendingStatus = lambda h: 0
    nvml.nvmlDeviceGetTotalEccErrors = lambda h, *_: 0
    nvml.nvmlEventSetCreate = driver.create
    nvml.nvmlDeviceRegisterEvents = driver.register
    nvml.nvmlEventSetWait_v2 = driver.wait
    nvml.nvmlEventSetFree = driver.freed.append
    return nvml


def test_xids_of_the_other_gpus_are_read_after_one_is_lost() -> None:
    gpus = [_gpu(i, H100, 80 * GiB, index=i) for i in range(3)]
    driver = _Driver(gpus)
    nvml = _nvml(gpus, driver)
    check = NvmlHealthCheck(discover(nvml, hostname="box"), nvml)
    try:
        assert check.check() == []
        gpus[0]["lost"] = True  # Xid 79: GPU 0 fell off the bus
        assert check.check() == [GpuFault(("box", 0), LOST)]
        driver.xid(2, 74)  # an NVLink error on GPU 2, after the loss
        assert check.check() == [
            GpuFault(("box", 0), LOST),
            GpuFault(("box", 2), "Xid 74 (NVLink error)"),
        ]
        driver.xid(1, 119)
        assert check.check() == [
            GpuFault(("box", 0), LOST),
            GpuFault(("box", 1), "Xid 119 (GSP firmware timeout)"),
        ]
        assert driver.freed == [0]  # the set holding the lost GPU, once
    finally:
        check.close()
    assert driver.freed == [0, 1]
