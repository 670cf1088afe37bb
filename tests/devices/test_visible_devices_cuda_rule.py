"""``CUDA_VISIBLE_DEVICES`` is read entry by entry as CUDA reads it: an entry naming no GPU
(an index the machine lacks, a UUID prefix no GPU has or two GPUs share) ends the list, and
a GPU named twice makes CUDA show none."""

from __future__ import annotations

import pytest
from test_devices import MiB, _gpu, fake_nvml

from danlu.devices import DeviceUnavailableError, discover

H100 = "NVIDIA H100 80GB HBM3"


def _four() -> list[dict[str, object]]:
    uuids = ["GPU-ab12-0", "GPU-ab34-1", "GPU-cd56-2", "GPU-ef78-3"]
    return [_gpu(i, H100, 81559 * MiB, uuid=uuid) for i, uuid in enumerate(uuids)]


def _served(value: str) -> list[int]:
    inv = discover(fake_nvml(_four()), hostname="box", environ={"CUDA_VISIBLE_DEVICES": value})
    return [g.index for g in inv.gpus]


@pytest.mark.parametrize(
    ("value", "indices"),
    [
        ("0,7,2", [0]),  # index 7 names no GPU: CUDA stops there
        ("GPU-cd,GPU-zz,GPU-ef", [2]),  # a prefix no GPU has stops the list
        ("GPU-ef,GPU-ab,GPU-cd", [3]),  # GPU-ab is ambiguous (GPUs 0 and 1): CUDA stops
        ("GPU-ab3,GPU-ab1", [0, 1]),  # prefixes each one GPU has
    ],
)
def test_an_entry_naming_no_single_gpu_ends_the_list(
    value: str, indices: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    assert _served(value) == indices
    if len(value.split(",")) > len(indices):
        assert "are not served" in caplog.text


def test_an_ambiguous_prefix_alone_serves_nothing_and_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with pytest.raises(DeviceUnavailableError, match=r"CUDA_VISIBLE_DEVICES='GPU-ab' shows"):
        _served("GPU-ab")
    assert "entry 'GPU-ab' names 2 GPUs" in caplog.text


@pytest.mark.parametrize("value", ["1,1", "0,2,0", "GPU-cd,2", "1, 1"])
def test_a_gpu_named_twice_is_a_clear_error(value: str) -> None:
    with pytest.raises(DeviceUnavailableError, match=r"names GPU \d twice.*list each GPU once"):
        _served(value)


def test_mig_instances_are_named_as_the_reason_nothing_is_served() -> None:
    value = "MIG-4f5e6d7c-0000-1111-2222-333344445555"
    with pytest.raises(DeviceUnavailableError, match=r"hides every GPU: it names MIG instances"):
        _served(value)
