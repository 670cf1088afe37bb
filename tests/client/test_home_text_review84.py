"""``find_server`` and ``Client.from_home`` take the danlu home as a path or as its text
(``"~/.danlu"``): a string was an AttributeError (``'str' object has no attribute
'expanduser'``). A server URL that is not text (``Client(os.environ.get("DANLU_URL"))``
with it unset) is a ConfigError, not an AttributeError."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from danlu.client import Client, NoServerError, find_server
from danlu.core.errors import ConfigError


def home_with_server(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    record = {"url": "http://127.0.0.1:8470", "pid": 1, "hostname": "another-host"}
    (root / "server.json").write_text(json.dumps(record), encoding="utf-8")
    (root / "admin.token").write_text("tok-123\n", encoding="utf-8")
    return root


def test_a_home_given_as_text_is_read(tmp_path: Path) -> None:
    home = home_with_server(tmp_path / "home")
    assert find_server(str(home)) == ("http://127.0.0.1:8470", "tok-123")
    with Client.from_home(str(home)) as client:
        assert (client.url, client.token) == ("http://127.0.0.1:8470", "tok-123")


def test_a_home_given_as_text_with_a_tilde_is_under_the_user_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    home_with_server(tmp_path / "dl")
    assert find_server("~/dl") == ("http://127.0.0.1:8470", "tok-123")


def test_a_missing_home_given_as_text_is_no_server(tmp_path: Path) -> None:
    with pytest.raises(NoServerError, match="no danlu server found"):
        find_server(str(tmp_path / "none"))


@pytest.mark.parametrize("url", [None, 8470, b"http://127.0.0.1:8470"])
def test_a_server_url_that_is_not_text_is_a_config_error(url: Any) -> None:
    with pytest.raises(ConfigError) as caught:
        Client(url, "tok")
    assert "the server URL must be text" in str(caught.value)
    assert "DANLU_URL" in str(caught.value)
