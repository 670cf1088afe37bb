"""A number flag's value out of its bounds, or no number at all, is one ``error:`` line
naming the flag and saying what it takes, exit 2, as README.md promises of a bad flag value;
it was click's usage text and a boxed ``Invalid value for '--limit'``."""

from __future__ import annotations

import pytest
from cli_fake_api import invoke, jobs_app, serve_jobs_commands

from danlu.cli.main import app


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["ls", "--limit", "0"], "--limit: 0 is out of range; give a whole number from 1"),
        (
            ["ls", "--limit", "many"],
            "--limit: 'many' is not a whole number; give one from 1 to 1000, e.g. --limit ",
        ),
    ],
)
def test_a_bad_number_flag_is_one_error_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, args: list[str], said: str
) -> None:
    fake = serve_jobs_commands(monkeypatch)
    code, out, err = invoke(jobs_app(), *args)
    assert code == 2, (out, err)
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"error: {said}"), err
    assert "Usage" not in err and "╭" not in err, err
    assert fake.requests == []  # refused before anything is sent


def test_a_float_flag_below_its_least_names_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    serve_jobs_commands(monkeypatch)
    code, out, err = invoke(app, "top", "--interval", "0")
    assert code == 2, (out, err)
    assert len(err.splitlines()) == 1, err
    assert err.startswith(
        "error: --interval: 0 is out of range; give a number from 0.1 to 3600,"
    ), err
