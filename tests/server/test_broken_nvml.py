"""The GPUs the control plane serves where NVML is missing or broken. A host without NVML (a
laptop: no ``pynvml``, or no NVIDIA driver, whose library NVML cannot find) runs on one fake
GPU, said at start-up; a host whose NVML is there and fails (its kernel module and library of
different driver versions, the module not loaded) refused to be read as one, and fell back to
that fake GPU too: jobs were scheduled onto a GPU that does not exist. It now refuses to start,
naming the cause and the fixes. Its discovery reads ``CUDA_DEVICE_ORDER`` too, which it was
not given: a host of two GPU models warned of index-named GPUs whatever its setting."""

from __future__ import annotations

import logging
import sys
import types
from pathlib import Path
from typing import Any

import pytest

import danlu.server.main as main
from danlu.config import gpu_discovery_env, load_settings
from danlu.core.errors import ConfigError
from danlu.devices import discover
from danlu.server.app import build_inventory

GiB = 1024**3


class NVMLError(Exception):
    """pynvml's ``NVMLError``: the error code in ``value``."""

    def __init__(self, value: int, text: str) -> None:
        super().__init__(text)
        self.value = value


def _pynvml(init_error: NVMLError | None = None, names: tuple[str, ...] = ()) -> Any:
    """A stand-in for the ``pynvml`` module: ``nvmlInit`` raises ``init_error``, or NVML
    serves a GPU of 80 GiB named by each of ``names``."""

    def init() -> None:
        if init_error is not None:
            raise init_error

    module = types.ModuleType("pynvml")
    module.__dict__.update(
        NVML_TEMPERATURE_GPU=0,
        nvmlInit=init,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: len(names),
        nvmlDeviceGetHandleByIndex=lambda index: index,
        nvmlDeviceGetName=lambda index: names[index],
        nvmlDeviceGetUUID=lambda index: f"GPU-{index}",
        nvmlDeviceGetMemoryInfo=lambda index: types.SimpleNamespace(
            total=80 * GiB, used=0, free=80 * GiB
        ),
    )
    return module


MISMATCH = NVMLError(18, "RM has detected an NVML/RM version mismatch.")
NOT_LOADED = NVMLError(9, "Driver Not Loaded")
NO_LIBRARY = NVMLError(12, "NVML Shared Library Not Found")


@pytest.mark.parametrize(
    ("error", "fix"),
    [
        (MISMATCH, "different driver versions"),
        (NOT_LOADED, "the NVIDIA kernel module is not loaded"),
    ],
)
def test_a_host_whose_nvml_fails_refuses_to_start(
    error: NVMLError, fix: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _pynvml(error))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    said: list[str] = []
    with pytest.raises(ConfigError) as refused:
        main.find_inventory(None, said.append)
    text = str(refused.value)
    assert str(error) in text and fix in text and "--fake-gpus" in text
    assert "\n" not in text and said == []
    # create_app's own discovery (no inventory given) refuses it alike
    with pytest.raises(ConfigError, match="--fake-gpus"):
        build_inventory(load_settings(home=tmp_path / "home"))
    # the refusal's fix: fake GPUs given
    assert main.find_inventory("2x40GiB", said.append).source == "fake"
    assert said and "--fake-gpus 2x40GiB" in said[-1]


def test_a_start_up_refused_for_broken_nvml_leaves_the_home_usable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _pynvml(MISMATCH))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    settings = load_settings(home=tmp_path / "home")
    with pytest.raises(ConfigError, match="version mismatch"):
        main.prepare(settings, port=0, start_loops=False, announce=lambda _text: None)
    prepared = main.prepare(settings, port=0, fake_gpus="1x80GiB", start_loops=False)
    try:
        assert prepared.inventory.source == "fake"
    finally:
        prepared.close()


@pytest.mark.parametrize("pynvml", [None, _pynvml(NO_LIBRARY)], ids=["no-pynvml", "no-driver"])
def test_a_host_without_nvml_runs_on_one_fake_gpu(
    pynvml: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", pynvml)  # None: its import fails
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    said: list[str] = []
    inventory = main.find_inventory(None, said.append)
    assert inventory.source == "fake" and len(inventory.gpus) == 1
    assert "using FAKE GPUs (1x80GiB)" in said[-1]
    assert build_inventory(load_settings(home=tmp_path / "home")).source == "fake"


def test_discovery_is_given_the_cuda_device_order(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _pynvml(names=("NVIDIA H100", "NVIDIA A100")))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    assert gpu_discovery_env() == {"CUDA_VISIBLE_DEVICES": "0,1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    with caplog.at_level(logging.WARNING):
        inventory = discover(environ=gpu_discovery_env())
    assert [g.index for g in inventory.gpus] == [0, 1]
    assert "names GPUs by index" not in caplog.text
    # CUDA's own order: the warning is given
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    with caplog.at_level(logging.WARNING):
        discover(environ=gpu_discovery_env())
    assert "names GPUs by index" in caplog.text
