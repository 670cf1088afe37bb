"""The NVML health check given odd answers (a fake NVML module): a field read as ``"N/A"``,
None, a negative count or a tuple of the wrong shape is skipped like an unsupported one, and
a malformed Xid event is passed over, instead of a raw ValueError/TypeError ending the
whole check (which hid the other GPUs' faults and lost the Xid events already read)."""

from __future__ import annotations

import types
from typing import Any

import pytest
from test_devices import fake_nvml
from test_health import _gpus, _NvmlError, _with_health

from danlu.devices import discover
from danlu.devices.health import GpuFault, NvmlHealthCheck

LOST = GpuFault(("box", 0), "GPU is lost (fell off the bus): reset or reboot")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("ecc", "N/A"),
        ("ecc", -1),
        ("ecc", float("nan")),
        ("retired", "Enabled"),
        ("rows", (0, 0)),
        ("rows", None),
        ("rows", (0, "N/A", 1, 0)),
        ("rows", "0000"),
    ],
)
def test_an_odd_value_on_one_gpu_leaves_the_other_gpus_faults_found(field: str, value: Any) -> None:
    gpus = _gpus(3)
    nvml = _with_health(fake_nvml(gpus), gpus, [])
    check = NvmlHealthCheck(discover(nvml, hostname="box"), nvml)
    assert check.check() == []
    gpus[0]["lost"] = True
    gpus[1][field] = value
    gpus[2]["ecc"] = 2
    try:
        assert check.check() == [
            LOST,
            GpuFault(("box", 2), "2 uncorrectable ECC errors since the driver loaded"),
        ]
    finally:
        check.close()


def test_a_malformed_xid_event_is_passed_over_and_the_others_reported() -> None:
    gpus = _gpus(3)
    nvml = _with_health(fake_nvml(gpus), gpus, [])
    check = NvmlHealthCheck(discover(nvml, hostname="box"), nvml)
    assert check.check() == []
    waiting = [
        types.SimpleNamespace(device=gpus[2], eventType=8, eventData=79),
        types.SimpleNamespace(device=gpus[1], eventType=8, eventData=None),
        types.SimpleNamespace(device=gpus[1], eventType="N/A", eventData=48),
        types.SimpleNamespace(device=gpus[0], eventType=8),
        types.SimpleNamespace(device=gpus[1], eventType=8, eventData=48),
    ]
    _events_then_timeout(nvml, waiting)
    try:
        assert check.check() == [
            GpuFault(("box", 2), "Xid 79 (GPU fell off the bus)"),
            GpuFault(("box", 1), "Xid 48 (double-bit ECC error)"),
        ]
        assert check.check() == []  # each event once
    finally:
        check.close()


def _events_then_timeout(nvml: Any, waiting: list[Any]) -> None:
    """NVML's event wait gives ``waiting``'s events in order, then times out."""

    def wait(event_set: Any, timeout_ms: int) -> Any:
        if not waiting:
            raise _NvmlError(10)  # TIMEOUT
        return waiting.pop(0)

    nvml.nvmlEventSetWait_v2 = wait


def _no_uuid(handle: object) -> str:
    raise _NvmlError(999)


def test_an_event_whose_gpu_has_an_odd_index_closes_nothing() -> None:
    gpus = _gpus(2)
    nvml = _with_health(fake_nvml(gpus), gpus, [(1, 79), (0, 48)])
    nvml.nvmlDeviceGetIndex = lambda h: -1 if h["index"] == 1 else h["index"]
    check = NvmlHealthCheck(discover(nvml, hostname="box"), nvml)
    nvml.nvmlDeviceGetUUID = _no_uuid  # named by its index alone: the odd one names none
    try:
        assert check.check() == [GpuFault(("box", 0), "Xid 48 (double-bit ECC error)")]
    finally:
        check.close()


def test_an_xid_event_without_its_gpu_is_passed_over_and_the_others_reported() -> None:
    """An event read without its ``device`` was an AttributeError out of the check: the
    faults found so far and the events read after it were lost."""
    gpus = _gpus(2)
    nvml = _with_health(fake_nvml(gpus), gpus, [])
    check = NvmlHealthCheck(discover(nvml, hostname="box"), nvml)
    assert check.check() == []
    gpus[0]["ecc"] = 1
    waiting = [
        types.SimpleNamespace(eventType=8, eventData=79),
        types.SimpleNamespace(device=gpus[1], eventType=8, eventData=48),
    ]
    _events_then_timeout(nvml, waiting)
    try:
        assert check.check() == [
            GpuFault(("box", 0), "1 uncorrectable ECC errors since the driver loaded"),
            GpuFault(("box", 1), "Xid 48 (double-bit ECC error)"),
        ]
    finally:
        check.close()
