"""Discovery honours ``CUDA_VISIBLE_DEVICES``: NVML lists every GPU of the machine, so a node
agent started with ``CUDA_VISIBLE_DEVICES=1,3`` offered all eight."""

from __future__ import annotations

import pytest
from test_devices import MiB, _gpu, fake_nvml

from danlu.config import gpu_discovery_env
from danlu.devices import DeviceUnavailableError, discover
from danlu.devices.nvml import visible_devices

H100 = "NVIDIA H100 80GB HBM3"


def _eight() -> list[dict[str, object]]:
    return [_gpu(i, H100, 81559 * MiB, uuid=f"GPU-{i}aa-{i}") for i in range(8)]


@pytest.mark.parametrize(
    ("value", "indices"),
    [
        ("1,3", [1, 3]),
        (" 3 , 1 ", [1, 3]),
        ("GPU-5aa-5,GPU-2", [2, 5]),  # a unique prefix is enough
        ("0,GPU-7aa-7", [0, 7]),
        ("2,-1,4", [2]),  # CUDA reads up to the first entry that is no device
        ("6,9", [6]),  # an index the machine does not have shows nothing
    ],
)
def test_only_the_visible_gpus_are_served_with_their_nvml_indices(
    value: str, indices: list[int]
) -> None:
    inv = discover(fake_nvml(_eight()), hostname="box", environ={"CUDA_VISIBLE_DEVICES": value})
    assert [g.index for g in inv.gpus] == indices
    assert inv.device_map() == {(0, i): str(index) for i, index in enumerate(indices)}


def test_unset_serves_every_gpu() -> None:
    inv = discover(fake_nvml(_eight()), hostname="box", environ={})
    assert [g.index for g in inv.gpus] == list(range(8))


@pytest.mark.parametrize("value", ["", "-1", " ", "MIG-1aa", "none"])
def test_a_value_that_hides_every_gpu_is_a_clear_error(value: str) -> None:
    with pytest.raises(DeviceUnavailableError, match=r"CUDA_VISIBLE_DEVICES=.*hides every GPU"):
        discover(fake_nvml(_eight()), environ={"CUDA_VISIBLE_DEVICES": value})


def test_visible_gpus_the_machine_lacks_say_so() -> None:
    with pytest.raises(DeviceUnavailableError, match="no GPU of those CUDA_VISIBLE_DEVICES"):
        discover(fake_nvml(_eight()), environ={"CUDA_VISIBLE_DEVICES": "8,GPU-x"})


def test_a_hidden_gpu_is_never_read(caplog: pytest.LogCaptureFixture) -> None:
    gpus = _eight()
    gpus[0]["total"] = -1  # unreadable: it would be warned about and left out
    nvml = fake_nvml(gpus)
    read = nvml.nvmlDeviceGetMemoryInfo
    seen: list[str] = []

    def memory(handle: dict[str, object]) -> object:
        seen.append(str(handle["uuid"]))
        return read(handle)

    nvml.nvmlDeviceGetMemoryInfo = memory
    inv = discover(nvml, environ={"CUDA_VISIBLE_DEVICES": "1"})
    assert [g.index for g in inv.gpus] == [1]
    assert seen == ["GPU-1aa-1"] and "cannot be read" not in caplog.text


def test_the_server_passes_its_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4")
    env = gpu_discovery_env()
    assert env == {"CUDA_VISIBLE_DEVICES": "4"}
    assert [g.index for g in discover(fake_nvml(_eight()), environ=env).gpus] == [4]
    assert len(discover(fake_nvml(_eight())).gpus) == 8  # no environment given: every GPU


def test_visible_devices_parses_as_cuda_does() -> None:
    assert visible_devices(None) is None
    assert visible_devices("") == (frozenset(), ())
    assert visible_devices("0,GPU-ab,x,3") == (frozenset({0}), ("GPU-ab",))
