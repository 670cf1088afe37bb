"""``danlu sweep show`` writes a boolean parameter as the spec and ``DANLU_HPARAMS`` write it,
``true`` or ``false``: it printed Python's ``True``, a word no spec or trial sees."""

from __future__ import annotations

import pytest
from cli_fake_api import invoke, serve_jobs_commands
from test_sweep_metric_unreported import SWEEP_ID, _app, _sweep, _trial


def test_boolean_parameters_read_as_the_spec_writes_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = serve_jobs_commands(monkeypatch)
    on, off = _trial(api, 0, best=0.5), _trial(api, 1, best=0.7)
    on["parameters"] = {"augment": True, "lr": 0.01}
    off["parameters"] = {"augment": False, "lr": 0.1}
    _sweep(api, "loss", [on, off])
    code, out, err = invoke(_app(), "sweep", "show", SWEEP_ID)
    assert code == 0, out + err
    rows = [line for line in out.splitlines() if "augment=" in line]
    assert len(rows) == 2, out
    cells = sorted(row.strip("│ ").rsplit("│", 1)[1].strip() for row in rows)
    assert cells == ["augment=false, lr=0.1", "augment=true, lr=0.01"], out
    assert "True" not in out and "False" not in out, out
