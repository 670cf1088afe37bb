"""A user given only a token (``DANLU_TOKEN`` set, no ``DANLU_URL``, no ``server.json`` in
the home) was told ``no danlu server found at ~/.danlu: start one with danlu up``: a
server of her own, where she needs the shared one's address. With a token given and no URL,
the error now says to set ``DANLU_URL`` (or ``--url``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_fake_api import invoke, jobs_app


@pytest.fixture(autouse=True)
def _no_danlu_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DANLU_URL", "DANLU_TOKEN", "DANLU_HOME"):
        monkeypatch.delenv(name, raising=False)


def test_a_token_from_the_environment_without_a_url_is_told_to_set_danlu_url(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DANLU_TOKEN", "dl_alices_token")
    code, out, err = invoke(jobs_app(), "ls", "--home", str(tmp_path))
    assert code == 2 and out == ""
    assert "set DANLU_URL, or pass --url, to the control plane's address" in err, err
    assert "dl_alices_token" not in err


def test_a_token_flag_without_a_url_is_told_to_set_danlu_url(tmp_path: Path) -> None:
    code, _, err = invoke(jobs_app(), "show", "x", "--home", str(tmp_path), "--token", "t0k")
    assert code == 2 and "set DANLU_URL, or pass --url" in err, err


def test_without_a_token_the_hint_is_still_to_start_a_server(tmp_path: Path) -> None:
    code, _, err = invoke(jobs_app(), "ls", "--home", str(tmp_path))
    assert code == 2 and f"no danlu server found at {tmp_path}" in err
    assert "DANLU_URL" not in err, err
