"""``CUDA_VISIBLE_DEVICES`` by index on a host with GPUs of two models (a fake NVML module):
danlu reads an index as NVML's (PCI bus order), CUDA as its own, fastest GPU first, unless
``CUDA_DEVICE_ORDER=PCI_BUS_ID``; ``CUDA_VISIBLE_DEVICES=0`` meant for the A100 served the
T4 before it on the bus without a word. A warning now names the fix (UUIDs)."""

from __future__ import annotations

import pytest
from test_devices import GiB, _gpu, fake_nvml

from danlu.devices import discover

T4, A100 = "Tesla T4", "NVIDIA A100-SXM4-80GB"
WARNING = "names GPUs by index on a host with GPUs of 2 models"


def _mixed() -> list[dict[str, object]]:
    return [_gpu(0, T4, 15 * GiB), _gpu(1, A100, 80 * GiB), _gpu(2, A100, 80 * GiB)]


def test_indices_on_a_host_of_two_models_are_warned_of(caplog: pytest.LogCaptureFixture) -> None:
    inventory = discover(fake_nvml(_mixed()), hostname="box", environ={"CUDA_VISIBLE_DEVICES": "0"})
    assert [g.name for g in inventory.gpus] == [T4]  # NVML's index 0, as before
    assert WARNING in caplog.text and "nvidia-smi -L" in caplog.text
    assert f"({A100}, {T4})" in caplog.text


@pytest.mark.parametrize(
    ("environ", "gpus"),
    [
        ({"CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, _mixed()),
        ({"CUDA_VISIBLE_DEVICES": "GPU-1,GPU-0"}, _mixed()),  # by UUID: no order to mistake
        ({}, _mixed()),  # every GPU served
        ({"CUDA_VISIBLE_DEVICES": "1,0"}, [_gpu(i, A100, 80 * GiB) for i in range(2)]),
    ],
)
def test_no_warning_where_the_order_cannot_be_mistaken(
    caplog: pytest.LogCaptureFixture, environ: dict[str, str], gpus: list[dict[str, object]]
) -> None:
    discover(fake_nvml(gpus), hostname="box", environ=environ)
    assert WARNING not in caplog.text and "names GPUs by index" not in caplog.text
