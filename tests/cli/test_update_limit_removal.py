"""``danlu update JOB --time-limit none`` / ``--deadline none`` pass the word to the server,
which removes the limit; a word it does not read is refused, named by the flag, saying how
to remove one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_fake_api import invoke
from cli_real_api import real_api

from danlu.cli.main import app


def test_update_removes_a_time_limit_and_a_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: train\ncommand: [python, train.py]\ntime_limit: 1h\ndeadline: 1d\n")
    with real_api(tmp_path, monkeypatch):
        code, out, err = invoke(app, "submit", str(spec), "--json")
        assert code == 0, out + err
        job = json.loads(out)["id"]
        code, out, err = invoke(app, "update", job, "--time-limit", "none", "--deadline", "NONE")
        assert (code, out.strip()) == (0, f"job {job}: time_limit none, deadline none"), out + err
        code, out, err = invoke(app, "update", job, "--time-limit", "nevr")
        assert code == 2 and "--time-limit: " in err and "write none" in err, out + err
        code, out, err = invoke(app, "show", job, "--json")
        assert code == 0, out + err
        shown = json.loads(out)
        assert (shown["time_limit"], shown["deadline_at"]) == (None, None)
