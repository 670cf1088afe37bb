"""``Client.from_home`` takes the limits ``Client(...)`` takes (``busy_retries``,
``reconnect_for``, ``follow_read_timeout``) with the same defaults and checks, and hands them
to the client it makes: a caller of ``from_home`` could not set how long a log follow waits
for its stream's next bytes."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from danlu.client import Client
from danlu.client.rest import FOLLOW_READ_TIMEOUT, RECONNECT_FOR
from danlu.core.errors import SpecError


def home_with_server(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    record = {"url": "http://127.0.0.1:8470", "pid": 1, "hostname": "another-host"}
    (root / "server.json").write_text(json.dumps(record), encoding="utf-8")
    (root / "admin.token").write_text("tok-123\n", encoding="utf-8")
    return root


def test_from_home_hands_its_limits_to_the_client(tmp_path: Path) -> None:
    home = home_with_server(tmp_path / "home")
    with Client.from_home(
        home, busy_retries=2, reconnect_for=7.5, follow_read_timeout=12.0
    ) as client:
        assert client.follow_read_timeout == 12.0
        assert client.reconnect_for == 7.5
        assert client.busy_retries == 2


def test_from_home_has_the_clients_defaults(tmp_path: Path) -> None:
    home = home_with_server(tmp_path / "home")
    with Client.from_home(home) as client, Client("http://127.0.0.1:8470") as plain:
        assert client.follow_read_timeout == plain.follow_read_timeout == FOLLOW_READ_TIMEOUT
        assert client.reconnect_for == plain.reconnect_for == RECONNECT_FOR
        assert client.busy_retries == plain.busy_retries


@pytest.mark.parametrize("value", [0, -1.0, math.nan, math.inf, "300", True])
def test_from_home_refuses_a_follow_read_timeout_as_the_client_does(
    tmp_path: Path, value: Any
) -> None:
    home = home_with_server(tmp_path / "home")
    with pytest.raises(SpecError) as plain:
        Client("http://127.0.0.1:8470", follow_read_timeout=value)
    with pytest.raises(SpecError) as found:
        Client.from_home(home, follow_read_timeout=value)
    assert found.value.field == plain.value.field == "follow_read_timeout"
    assert str(found.value) == str(plain.value)


def test_a_bad_limit_is_refused_before_the_home_is_read(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as caught:  # no server.json there: the limit is named
        Client.from_home(tmp_path / "empty", follow_read_timeout=-5)
    assert caught.value.field == "follow_read_timeout"
