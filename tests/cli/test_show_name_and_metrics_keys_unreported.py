"""``danlu show NAME`` and ``danlu metrics JOB --keys``:

1. ``danlu show train`` (a job's name, not its id) said only that the job was not found;
   the error now goes on to say that ``danlu ls --name train`` lists jobs by name. Text an
   id could be (hex digits: an id or the prefix of one) gets no such hint.
2. ``danlu metrics JOB --keys los`` (a misspelt key) showed a column of ``-`` (followed:
   lines without it) without a word; a ``note:`` line on stderr now names the keys no
   record shown holds and the metrics the records do hold. The exit code, stdout's table
   and ``--json`` are unchanged.
"""

from __future__ import annotations

import errno
import io
import json

import pytest
from cli_fake_api import FakeApi, invoke, jobs_app, metrics_and_events_app, serve_commands


def test_show_by_name_hints_at_ls_name(monkeypatch: pytest.MonkeyPatch) -> None:
    api = serve_commands(monkeypatch)
    api.add_job("train", "RUNNING")
    code, out, err = invoke(jobs_app(), "show", "train")
    assert code == 2
    assert out == ""
    assert err.startswith("error: ")
    assert "not found" in err
    assert err.rstrip("\n").endswith("; `danlu ls --name train` lists jobs by name")


def test_show_hint_quotes_a_name_for_the_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    serve_commands(monkeypatch)
    code, _, err = invoke(jobs_app(), "show", "my run")
    assert code == 2
    assert "`danlu ls --name 'my run'` lists jobs by name" in err


@pytest.mark.parametrize("text", ["abcd", "0123456789ab", "DEADBEEF"])
def test_show_of_an_unknown_id_gets_no_name_hint(
    monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    serve_commands(monkeypatch)
    code, _, err = invoke(jobs_app(), "show", text)
    assert code == 2
    assert "not found" in err
    assert "danlu ls" not in err


def test_show_of_a_known_id_is_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    api = serve_commands(monkeypatch)
    job = api.add_job("train", "RUNNING")
    code, out, err = invoke(jobs_app(), "show", job["id"])
    assert code == 0, err
    assert "train" in out and err == ""


RECORDS = [
    {"step": 1, "time": 100.0, "loss": 2.0, "lr": 0.1},
    {"step": 2, "time": 101.0, "loss": 1.5, "acc": 0.5},
]


def _metrics(
    monkeypatch: pytest.MonkeyPatch, *args: str, state: str = "RUNNING"
) -> tuple[int, str, str]:
    api: FakeApi = serve_commands(monkeypatch)
    job = api.add_job("train", state)
    api.add_metrics(job["id"], RECORDS)
    return invoke(metrics_and_events_app(), "metrics", job["id"], *args)


def test_metrics_keys_no_record_holds_get_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = _metrics(monkeypatch, "--keys", "los,lr")
    assert code == 0
    assert "los" in out  # the table is still printed, its column all "-"
    assert err == "note: --keys: no record shown holds los; they hold loss, lr, acc\n"


def test_metrics_keys_followed_get_the_note_too(monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = _metrics(monkeypatch, "--follow", "--keys", "los", state="SUCCEEDED")
    assert code == 0
    assert out.count("step ") == 2
    assert err == "note: --keys: no record shown holds los; they hold loss, lr, acc\n"


@pytest.mark.parametrize("keys", [None, "loss", "acc,lr"])
def test_metrics_keys_some_record_holds_get_no_note(
    monkeypatch: pytest.MonkeyPatch, keys: str | None
) -> None:
    code, out, err = _metrics(monkeypatch, *(["--keys", keys] if keys else []))
    assert code == 0
    assert "step" in out
    assert err == ""


def test_metrics_note_on_an_unwritable_stderr_is_let_go(monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    from danlu.cli import metrics as metrics_cli

    class Full(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(metrics_cli, "err", Console(file=Full()))
    monkeypatch.setattr("danlu.cli.output.quiet_stderr", lambda: None)
    code, out, _ = _metrics(monkeypatch, "--keys", "los")
    assert code == 0
    assert "los" in out


def test_metrics_json_with_a_misspelt_key_is_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = _metrics(monkeypatch, "--json", "--keys", "los")
    assert code == 0
    assert json.loads(out) == [{"step": 1, "time": 100.0}, {"step": 2, "time": 101.0}]
    assert err == ""


def test_note_counts_the_metrics_it_leaves_unnamed() -> None:
    from danlu.cli.metrics import keys_unreported_note

    records = [{"step": 1, "time": 1.0, **{f"m{i}": float(i) for i in range(10)}}]
    note = keys_unreported_note(records, ["x"])
    assert note == (
        "note: --keys: no record shown holds x; they hold m0, m1, m2, m3, m4, m5, m6, m7 and 2 more"
    )
    assert keys_unreported_note([{"step": 1, "time": 1.0}], ["x"]) == (
        "note: --keys: no record shown holds x, nor any other metric"
    )
    assert keys_unreported_note([], ["x"]) is None
    # a run field (--superseded) is no metric; a checkpoint's step is one a record holds
    runs = [{"step": 1, "attempt": 1, "superseded": False, "checkpoint_step": 1}]
    assert keys_unreported_note(runs, ["checkpoint_step"], runs=True) is None
    assert keys_unreported_note(runs, ["attempt"], runs=True) == (
        "note: --keys: no record shown holds attempt; they hold checkpoint_step"
    )
    # without --superseded the API sends no run fields: a metric named so is a metric
    assert keys_unreported_note([{"step": 1, "attempt": 4.0}], ["attempt"]) is None
