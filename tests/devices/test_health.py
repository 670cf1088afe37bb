"""GPU health checks through NVML (a fake NVML module): a lost GPU, row remapping failed or
pending, retired pages pending, uncorrectable ECC errors, critical Xid events (those an
application raises passed over); checks a GPU does not support are skipped."""

from __future__ import annotations

import types
from typing import Any

from test_devices import _gpu, fake_nvml

from danlu.core.cluster import Cluster, Node, gpu_type
from danlu.devices import discover, fake_inventory, inventory_from_cluster
from danlu.devices.health import APPLICATION_XIDS, GpuFault, NvmlHealthCheck, health_check

GiB = 1024**3
H100 = "NVIDIA H100 80GB HBM3"


class _NvmlError(Exception):
    """pynvml's NVMLError: ``value`` is NVML's return code."""

    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


def _with_health(nvml: Any, gpus: list[dict[str, Any]], events: list[tuple[int, int]]) -> Any:
    """``nvml`` with the health calls: per GPU ``lost``, ``rows`` (corrected, uncorrected,
    pending, failed), ``retired`` (1: pages pending), ``ecc`` (None: not supported), and
    ``events`` (device index, Xid) waiting in the event set."""
    nvml.NVML_FEATURE_ENABLED = 1
    nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    nvml.NVML_VOLATILE_ECC = 0
    registered: list[int] = []
    nvml.registered = registered

    def handle(i: int) -> dict[str, Any]:
        if gpus[i].get("lost"):
            raise _NvmlError(15)
        return gpus[i]

    def field(name: str) -> Any:
        def read(h: dict[str, Any], *_: Any) -> Any:
            if h.get(name) is None:
                raise _NvmlError(3)  # NOT_SUPPORTED
            return h[name]

        return read

    def wait(event_set: Any, timeout_ms: int) -> Any:
        assert event_set == "events" and timeout_ms == 0
        if not events:
            raise _NvmlError(10)  # TIMEOUT
        device, xid = events.pop(0)
        return types.SimpleNamespace(device=gpus[device], eventType=8, eventData=xid)

    def register(h: dict[str, Any], kinds: int, event_set: Any) -> None:
        assert kinds == 8 and event_set == "events"
        if h.get("no_events"):
            raise _NvmlError(3)
        registered.append(h["index"])

    nvml.nvmlDeviceGetHandleByIndex = handle
    nvml.nvmlDeviceGetRemappedRows = field("rows")
    nvml.nvmlDeviceGetRetiredPagesPendingStatus = field("retired")
    nvml.nvmlDeviceGetTotalEccErrors = field("ecc")
    nvml.nvmlEventSetCreate = lambda: "events"
    nvml.nvmlDeviceRegisterEvents = register
    nvml.nvmlEventSetWait_v2 = wait
    nvml.nvmlEventSetFree = lambda s: nvml.calls.append("free")
    nvml.nvmlDeviceGetIndex = lambda h: h["index"]
    return nvml


def _gpus(count: int) -> list[dict[str, Any]]:
    return [
        _gpu(i, H100, 80 * GiB, index=i, rows=(0, 0, 0, 0), retired=0, ecc=0) for i in range(count)
    ]


def test_healthy_gpus_have_no_faults_and_each_fault_is_named() -> None:
    gpus = _gpus(6)
    events: list[tuple[int, int]] = []
    nvml = _with_health(fake_nvml(gpus), gpus, events)
    inventory = discover(nvml, hostname="box")
    check = NvmlHealthCheck(inventory, nvml)
    assert check.check() == []
    assert nvml.registered == [0, 1, 2, 3, 4, 5]
    gpus[0]["lost"] = True
    gpus[1]["rows"] = (0, 2, 1, 0)
    gpus[2]["rows"] = (0, 0, 0, 1)
    gpus[3]["retired"] = 1
    gpus[4]["ecc"] = 3
    events += [(5, 13), (5, 79), (1, 31), (4, 48)]
    faults = check.check()
    assert faults == [
        GpuFault(("box", 0), "GPU is lost (fell off the bus): reset or reboot"),
        GpuFault(
            ("box", 1), "row remapping pending (2 rows for uncorrectable errors): reset the GPU"
        ),
        GpuFault(("box", 2), "row remapping failed: the GPU needs service"),
        GpuFault(("box", 3), "retired pages pending: reset the GPU"),
        GpuFault(("box", 4), "3 uncorrectable ECC errors since the driver loaded"),
        GpuFault(("box", 5), "Xid 79 (GPU fell off the bus)"),
        GpuFault(("box", 4), "Xid 48 (double-bit ECC error)"),
    ]
    assert 13 in APPLICATION_XIDS and 31 in APPLICATION_XIDS
    # state faults are found again while they last; an Xid event only once
    assert [f.gpu[1] for f in check.check()] == [0, 1, 2, 3, 4]
    check.close()
    assert nvml.calls.count("free") == 1 and nvml.calls.count("shutdown") == 2


def test_checks_a_gpu_does_not_support_are_skipped() -> None:
    gpus = [
        _gpu(i, H100, 80 * GiB, index=i, no_events=True, rows=None, retired=None, ecc=None)
        for i in range(2)
    ]
    nvml = _with_health(fake_nvml(gpus), gpus, [(0, 79)])
    check = NvmlHealthCheck(discover(nvml, hostname="box"), nvml)
    assert check.check() == []  # no GPU took Xid events: the set is freed, never read
    assert nvml.calls.count("free") == 1
    gpus[1]["ecc"] = 1
    assert check.check() == [
        GpuFault(("box", 1), "1 uncorrectable ECC errors since the driver loaded")
    ]
    check.close()


def test_only_nvml_inventories_are_checked() -> None:
    gpus = _gpus(1)
    nvml = _with_health(fake_nvml(gpus), gpus, [])
    assert isinstance(health_check(discover(nvml, hostname="box"), nvml), NvmlHealthCheck)
    assert health_check(fake_inventory("2x80GiB")) is None
    cluster = Cluster((Node("n1", 4, gpu_type("H100")),))
    assert health_check(inventory_from_cluster(cluster, "slurm")) is None
