"""The control plane's start-up (:func:`danlu.server.main.prepare`, which ``danlu up``,
``danlu server`` and embedders call) refuses a bad ``port``, ``host`` or ``fake_gpus``
before it makes anything: no home is left behind, and a host name that cannot even be
encoded as one is the same clear error as an unknown one, not a traceback. So is
``--executor ray`` on a host without Ray (``import ray`` made to fail), which made the home
and its database before it was refused; a home made before is left as it was."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

import danlu.server.main as main
from danlu.config import load_settings
from danlu.core.errors import ConfigError
from danlu.server import listening

BAD_START_UPS: list[tuple[str, dict[str, Any], str]] = [
    ("port", {"port": 70000}, r"--port \(DANLU_PORT\) must be 0\.\.65535"),
    ("port", {"port": -1}, r"--port \(DANLU_PORT\) must be 0\.\.65535"),
    ("unknown host", {"host": "nosuch.invalid"}, r"--host 'nosuch\.invalid' is not an address"),
    ("label too long", {"host": "a" * 70}, r"--host 'a{70}' is not an address"),
    ("non-ASCII label too long", {"host": "é" * 70}, "is not a valid host name"),
    ("undecodable byte", {"host": "a\udcff"}, "is not a valid host name"),
    ("NUL", {"host": "a\x00b"}, "is not a valid host name"),
    ("fake GPUs", {"fake_gpus": "garbage"}, r"--fake-gpus 'garbage'"),
]


@pytest.mark.parametrize(
    ("given", "match"), [(g, m) for _, g, m in BAD_START_UPS], ids=[i for i, _, _ in BAD_START_UPS]
)
def test_a_refused_start_up_makes_no_home(
    tmp_path: Path, given: dict[str, Any], match: str
) -> None:
    home = tmp_path / "home"
    settings = load_settings(home=home)
    kwargs: dict[str, Any] = {"host": "127.0.0.1", "port": 0, "fake_gpus": "1x80GiB", **given}
    said: list[str] = []
    with pytest.raises(ConfigError, match=match):
        main.prepare(settings, start_loops=False, announce=said.append, **kwargs)
    assert not home.exists()
    assert said == []  # refused before the GPUs were looked for


def test_host_names_that_cannot_be_encoded_are_a_config_error_naming_the_flag() -> None:
    """``socket.bind`` raises ``TypeError`` (``encoding of hostname failed``) or a
    ``UnicodeError`` from the idna codec for such a name: the host check names ``--host``."""
    for host in ("é" * 70, "a\udcff", "ä." * 2 + "b" * 64):
        with pytest.raises(ConfigError, match=r"cannot listen on --host"):
            listening.bind(host, 0)
        with pytest.raises(ConfigError, match=r"--host .* is not an address"):
            listening.check_listen_address(host)


def test_a_good_host_and_port_still_start(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path / "home")
    prepared = main.prepare(
        settings, host="127.0.0.1", port=0, fake_gpus="1x80GiB", start_loops=False, announce=print
    )
    try:
        assert prepared.url.startswith("http://127.0.0.1:")
        assert (tmp_path / "home").is_dir()
    finally:
        prepared.close()


def files_of(home: Path) -> dict[str, tuple[int, int]]:
    """Every file and directory under ``home`` with its size and modification time."""
    return {
        str(path.relative_to(home)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in [home, *home.rglob("*")]
    }


def test_ray_not_installed_is_refused_before_the_home_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = tmp_path / "made"
    main.prepare(
        load_settings(home=made), port=0, fake_gpus="1x80GiB", start_loops=False, announce=print
    ).close()
    before = files_of(made)
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails, as on a host without it
    for home in (tmp_path / "new", made):
        settings = load_settings(home=home, executor="ray", ray_address="10.0.0.9:6379")
        with pytest.raises(ConfigError, match=r"needs Ray .*pip install 'danlu\[ray\]'"):
            main.prepare(settings, port=0, start_loops=False, announce=print)
    assert not (tmp_path / "new").exists()
    assert files_of(made) == before
