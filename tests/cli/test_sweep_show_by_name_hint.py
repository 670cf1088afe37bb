"""``danlu sweep show NAME``: a sweep is shown by its id, and a name given for it (not hex
digits) is refused with where names are listed, as ``danlu show NAME`` hints at
``danlu ls --name``; an id that no sweep has gets the server's error alone."""

from __future__ import annotations

import pytest
from cli_fake_api import invoke, serve_jobs_commands
from test_sweep_metric_unreported import _app


def test_a_sweep_s_name_given_for_its_id_points_at_sweep_ls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    serve_jobs_commands(monkeypatch)
    code, out, err = invoke(_app(), "sweep", "show", "lr-search")
    assert code == 2, out + err
    assert "`danlu sweep ls` lists sweeps by name" in err, err


def test_an_unknown_id_gets_no_name_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    serve_jobs_commands(monkeypatch)
    code, out, err = invoke(_app(), "sweep", "show", "abcdef012345")
    assert code == 2, out + err
    assert "not found" in err and "sweep ls" not in err, err
