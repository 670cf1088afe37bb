"""A malformed server URL is refused as one, naming ``--url``/``DANLU_URL`` and the form to
give, before the API token is looked for: ``danlu ls --url notaurl`` without a token was told
the server "needs an API token". A port outside 1-65535 and a host httpx would send
percent-encoded (``http://[bad``) are refused at once, where they failed at the first request
("Connection refused", "Name or service not known"). Every well-formed URL is still taken."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from danlu.cli.jobs import default_client
from danlu.client import Client, NoServerError
from danlu.client.discovery import server_base
from danlu.core.errors import ConfigError

MALFORMED = [
    "notaurl",
    "http://127.0.0.1:99999",
    "http://127.0.0.1:65536/api/v1",
    "http://127.0.0.1:0",
    "http://[bad",
    "http://[bad/api/v1",
    "http://ba]d:8470",
    "http://exa mple:8470",
]

WELL_FORMED = [
    ("http://127.0.0.1:8470", "http://127.0.0.1:8470"),
    ("http://127.0.0.1:8470/api/v1/", "http://127.0.0.1:8470"),
    ("https://danlu.example", "https://danlu.example"),
    ("http://danlu-1.example:1", "http://danlu-1.example:1"),
    ("http://gpu_head:65535", "http://gpu_head:65535"),
    ("http://localhost:8470/", "http://localhost:8470"),
    ("http://[::1]:8470", "http://[::1]:8470"),
    ("http://[::1]", "http://[::1]"),
    ("http://[fe80::1%25eth0]:8470", "http://[fe80::1%25eth0]:8470"),
    ("http://gateway.example/danlu/api/v1", "http://gateway.example/danlu"),
]


@pytest.fixture(autouse=True)
def _no_danlu_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DANLU_URL", "DANLU_TOKEN", "DANLU_HOME"):
        monkeypatch.delenv(name, raising=False)


def _home_of_another_server(root: Path) -> Path:
    """A home whose ``server.json`` names a server of another host, with its admin token."""
    root.mkdir()
    record = {"url": "http://127.0.0.1:8470", "pid": 1, "hostname": "another-host"}
    (root / "server.json").write_text(json.dumps(record), encoding="utf-8")
    (root / "admin.token").write_text("dl_admin\n", encoding="utf-8")
    return root


def _assert_names_the_url_and_the_fix(error: ConfigError, url: str) -> None:
    text = str(error)
    assert not isinstance(error, NoServerError), text
    assert "needs an API token" not in text
    assert f"the server URL '{url}'" in text, text
    assert "--url, DANLU_URL" in text and "http(s)://host[:port]" in text, text


@pytest.mark.parametrize("url", MALFORMED)
def test_server_base_refuses_a_malformed_url(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        server_base(url)
    _assert_names_the_url_and_the_fix(caught.value, url)


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999", "http://127.0.0.1:0"])
def test_a_port_out_of_range_is_named_with_the_range(url: str) -> None:
    port = url.rpartition(":")[2]
    with pytest.raises(ConfigError, match=f"has port {port}, outside 1-65535"):
        Client(url, "tok")


@pytest.mark.parametrize("url", ["http://[bad", "http://exa mple:8470"])
def test_a_host_that_is_no_host_is_not_a_url(url: str) -> None:
    with pytest.raises(ConfigError, match=r"is not a URL \(its host is no host name"):
        Client(url, "tok")


@pytest.mark.parametrize(("url", "base"), WELL_FORMED)
def test_a_well_formed_url_is_still_taken(url: str, base: str) -> None:
    assert server_base(url) == base
    with Client(url, "tok") as client:
        assert client.url == base


@pytest.mark.parametrize("url", MALFORMED)
def test_from_home_refuses_a_malformed_url_before_looking_for_a_token(
    tmp_path: Path, url: str
) -> None:
    with pytest.raises(ConfigError) as no_home:  # no server.json: no token anywhere
        Client.from_home(tmp_path / "empty", url=url)
    _assert_names_the_url_and_the_fix(no_home.value, url)
    home = _home_of_another_server(tmp_path / "home")
    with pytest.raises(ConfigError) as other_home:  # the home's token is another server's
        Client.from_home(home, url=url)
    _assert_names_the_url_and_the_fix(other_home.value, url)
    with pytest.raises(ConfigError) as with_token:
        Client.from_home(home, url=url, token="tok")
    assert str(with_token.value) == str(no_home.value)


def test_a_well_formed_url_without_a_token_still_needs_one(tmp_path: Path) -> None:
    with pytest.raises(NoServerError, match="needs an API token: pass --token"):
        Client.from_home(tmp_path / "empty", url="http://127.0.0.1:1")


@pytest.mark.parametrize("url", ["notaurl", "http://127.0.0.1:99999", "http://[bad"])
def test_the_cli_settings_refuse_a_malformed_url_flag_or_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, url: str
) -> None:
    with pytest.raises(ConfigError) as from_flag:
        default_client(tmp_path, url, None)
    _assert_names_the_url_and_the_fix(from_flag.value, url)
    monkeypatch.setenv("DANLU_URL", url)
    with pytest.raises(ConfigError) as from_variable:
        default_client(tmp_path, None, None)
    assert str(from_variable.value) == str(from_flag.value)
