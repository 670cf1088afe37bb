"""Starting the control plane: the GPUs it finds (one NVML cannot read is left out, not the
whole host), the port it takes (a port another server listens on is refused at once) and
the URL it hands its jobs (a reachable name, never the wildcard address it listens on)."""

from __future__ import annotations

import socket
import types
from pathlib import Path
from typing import Any

import pytest

import danlu.server.gpus as gpus
import danlu.server.main as main
from danlu.config import load_settings
from danlu.core.errors import ConfigError
from danlu.devices import discover
from danlu.server import listening

GiB = 1024**3


class _Lost(Exception):
    """pynvml's NVMLError for ``NVML_ERROR_GPU_IS_LOST``."""

    value = 15


def _nvml(count: int, lost: int | None = None, starts: bool = True) -> Any:
    """A stand-in for pynvml: ``count`` H100s, of which GPU ``lost`` fell off the bus."""

    def init() -> None:
        if not starts:
            raise RuntimeError("Driver Not Loaded")

    def memory(index: int) -> Any:
        if index == lost:
            raise _Lost("GPU is lost")
        return types.SimpleNamespace(total=80 * GiB, used=0, free=80 * GiB)

    return types.SimpleNamespace(
        NVML_TEMPERATURE_GPU=0,
        nvmlInit=init,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: count,
        nvmlDeviceGetHandleByIndex=lambda index: index,
        nvmlDeviceGetName=lambda index: "NVIDIA H100 80GB HBM3",
        nvmlDeviceGetUUID=lambda index: f"GPU-{index}",
        nvmlDeviceGetMemoryInfo=memory,
        nvmlDeviceGetUtilizationRates=lambda index: types.SimpleNamespace(gpu=0, memory=0),
        nvmlDeviceGetTemperature=lambda index, sensor: 40,
        nvmlDeviceGetPowerUsage=lambda index: 100_000,
    )


def test_one_lost_gpu_leaves_the_others_to_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """It used to fall back to one fake GPU: the three healthy H100s were dropped and jobs
    placed on a phantom GPU."""
    nvml = _nvml(4, lost=2)
    monkeypatch.setattr(gpus, "discover", lambda **_: discover(nvml, hostname="box"))
    said: list[str] = []
    inventory = main.find_inventory(None, said.append)
    assert inventory.source == "nvml" and said == []
    assert [g.uuid for g in inventory.gpus] == ["GPU-0", "GPU-1", "GPU-3"]
    # NVML there that cannot start: refused, not one fake GPU (tests/server/test_broken_nvml.py)
    broken = _nvml(4, starts=False)
    monkeypatch.setattr(gpus, "discover", lambda **_: discover(broken, hostname="box"))
    with pytest.raises(ConfigError, match="Driver Not Loaded"):
        main.find_inventory(None, said.append)
    assert said == []


def test_a_port_another_server_listens_on_is_refused_at_once() -> None:
    first = listening.bind("127.0.0.1", 0)
    try:
        port = first.getsockname()[1]
        with pytest.raises(ConfigError, match=f"cannot listen on --host 127.0.0.1 --port {port}"):
            listening.bind("127.0.0.1", port)
    finally:
        first.close()
    again = listening.bind("127.0.0.1", port)  # free once the first is closed
    again.close()


def _prepare(home: Path, said: list[str]) -> main.Prepared:
    settings = load_settings(home=home, fake_gpus="1x80GiB")
    return main.prepare(settings, host="0.0.0.0", port=0, start_loops=False, announce=said.append)


def _names(
    monkeypatch: pytest.MonkeyPatch, fqdn: str, known: set[str], hostname: str | None = None
) -> None:
    """This host's FQDN is ``fqdn`` and its name ``hostname`` (default: the FQDN's first
    label); only the names in ``known`` resolve."""
    resolve = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host in known:
            return resolve("127.0.0.1", *args, **kwargs)
        if isinstance(host, str) and host not in ("127.0.0.1", "::1", "0.0.0.0", "::"):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return resolve(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getfqdn", lambda name="": fqdn)
    name = hostname or fqdn.partition(".")[0]
    monkeypatch.setattr(socket, "gethostname", lambda: name)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def test_a_server_on_every_address_hands_its_jobs_this_hosts_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--host 0.0.0.0`` gave jobs ``DANLU_API_URL=http://0.0.0.0:PORT``: on another node,
    that node itself."""
    _names(monkeypatch, "gpu-head.example.org", {"gpu-head.example.org"})
    said: list[str] = []
    prepared = _prepare(tmp_path / "home", said)
    try:
        port = prepared.sock.getsockname()[1]
        assert prepared.sock.getsockname()[0] == "0.0.0.0"  # listens on every address
        assert prepared.url == f"http://gpu-head.example.org:{port}"
        assert prepared.app.state.danlu.executor._api_url == prepared.url
    finally:
        prepared.close()
    # /etc/hosts mapping the host's name to "127.0.0.1 localhost": its own name, not localhost
    _names(monkeypatch, "localhost", {"localhost", "gpu-head"}, hostname="gpu-head")
    prepared = _prepare(tmp_path / "home", said)
    try:
        assert prepared.url == f"http://gpu-head:{prepared.sock.getsockname()[1]}"
        assert not any("does not resolve" in line for line in said)
    finally:
        prepared.close()


def test_a_host_whose_name_does_not_resolve_is_reached_on_the_loopback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _names(monkeypatch, "lonely", set())
    said: list[str] = []
    prepared = _prepare(tmp_path / "home", said)
    try:
        port = prepared.sock.getsockname()[1]
        assert prepared.url == f"http://127.0.0.1:{port}"
        assert any("'lonely' does not resolve" in line for line in said)
    finally:
        prepared.close()
