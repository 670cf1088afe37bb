"""``danlu server --executor ray`` whose Ray head cannot be reached (nothing listens at
``--ray-address``), or whose ``--ray-address`` is no Ray address, refuses to start before it
makes anything, as one whose Slurm cannot be read does: it made the home, its database and its
admin token first, then refused (the address that is no address with a traceback). No Ray
cluster is started."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

import danlu.server.main as main
from danlu.config import load_settings
from danlu.core.errors import ConfigError


@pytest.fixture(autouse=True)
def _ray_installed() -> None:
    """Skipped without Ray (the ``ray`` extra), as the other Ray tests are, unless
    ``DANLU_TEST_REQUIRE_RAY`` says it must be there."""
    try:
        import ray  # noqa: F401 - only whether it is there
    except ImportError:
        if os.environ.get("DANLU_TEST_REQUIRE_RAY"):
            pytest.fail("Ray is required: pip install -e '.[ray]'")
        pytest.skip("Ray is not installed (pip install -e '.[ray]')")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def refusal(home: Path, address: str) -> str:
    """The refusal of a start-up of ``home`` with Ray at ``address``."""
    settings = load_settings(home=home, executor="ray", ray_address=address)
    said: list[str] = []
    with pytest.raises(ConfigError) as refused:
        main.prepare(settings, port=0, start_loops=False, announce=said.append)
    return str(refused.value)


def test_a_start_up_whose_ray_head_does_not_answer_makes_no_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    port = _closed_port()
    said = refusal(home, f"127.0.0.1:{port}")
    assert said.startswith("--executor ray: cannot read the cluster's nodes: nothing answers")
    assert f":{port}" in said and "ray start --head" in said
    assert not home.exists(), sorted(p.name for p in home.iterdir())


def test_a_start_up_whose_ray_address_is_no_address_makes_no_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    said = refusal(home, "head-without-port")
    assert "'head-without-port' is no Ray address" in said and "HOST:PORT" in said
    assert not home.exists(), sorted(p.name for p in home.iterdir())
