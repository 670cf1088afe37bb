"""A job command given a sweep's or job array's id: ``danlu submit --array`` prints the
array's id (``danlu wait`` and ``--after`` take it), and ``danlu cancel ARRAY``, ``show``,
``logs``, ``hold``, ``release``, ``why`` and ``metrics`` said only ``job '81c1' not
found``. The error now goes on to name the ``danlu sweep`` command that takes the id
(``cancel`` for a cancel, ``show`` for the others); an id that is no sweep's, and text no
id could be, are as before.
"""

from __future__ import annotations

from typing import Any

import pytest
from cli_fake_api import FakeApi, invoke, jobs_app, metrics_and_events_app, serve_commands

ARRAY_ID = "81c12f80846f"


def _with_array(monkeypatch: pytest.MonkeyPatch, array: bool = True) -> FakeApi:
    """The fake server, holding one job array (or sweep) that the id and its prefix find."""
    api = serve_commands(monkeypatch)
    sweep: dict[str, Any] = {"id": ARRAY_ID, "name": "shard", "array": array, "trials": []}
    api.sweeps[ARRAY_ID] = sweep
    api.sweeps[ARRAY_ID[:4]] = sweep  # the server finds a sweep by a 4+ character prefix
    return api


@pytest.mark.parametrize(
    ("command", "action"),
    [
        ("cancel", "cancel"),
        ("show", "show"),
        ("logs", "show"),
        ("hold", "show"),
        ("release", "show"),
        ("why", "show"),
    ],
)
def test_a_job_command_given_an_array_id_names_the_sweep_command(
    monkeypatch: pytest.MonkeyPatch, command: str, action: str
) -> None:
    _with_array(monkeypatch)
    code, out, err = invoke(jobs_app(), command, ARRAY_ID[:4])
    assert code == 2
    assert out == ""
    line = err.rstrip("\n")
    assert "\n" not in line
    assert line.startswith("error: ") and "not found" in line
    assert line.endswith(
        f"; {ARRAY_ID[:4]} is the job array {ARRAY_ID}: `danlu sweep {action} {ARRAY_ID}`"
    )


def test_the_whole_id_of_a_sweep_is_not_said_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    _with_array(monkeypatch, array=False)
    code, _, err = invoke(jobs_app(), "cancel", ARRAY_ID)
    assert code == 2
    assert err.rstrip("\n").endswith(f"; it is a sweep: `danlu sweep cancel {ARRAY_ID}`")


@pytest.mark.parametrize("text", ["deadbeef", "train"])
def test_no_sweep_hint_for_an_id_no_sweep_has(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    _with_array(monkeypatch)
    code, _, err = invoke(jobs_app(), "cancel", text)
    assert code == 2
    assert "not found" in err
    assert "danlu sweep" not in err


def test_a_job_found_is_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    api = _with_array(monkeypatch)
    job = api.add_job("train", "PENDING")
    code, out, err = invoke(jobs_app(), "hold", job["id"])
    assert code == 0, err
    assert "held" in out and "danlu sweep" not in out + err


def test_metrics_given_an_array_id_names_sweep_show(monkeypatch: pytest.MonkeyPatch) -> None:
    _with_array(monkeypatch)
    code, out, err = invoke(metrics_and_events_app(), "metrics", ARRAY_ID[:4])
    assert code == 2
    assert out == ""
    assert err.rstrip("\n").endswith(
        f"; {ARRAY_ID[:4]} is the job array {ARRAY_ID}: `danlu sweep show {ARRAY_ID}`"
    )
