"""``--since`` (``danlu ls``, ``danlu events``) said it takes "1d, 2h (back from now) or a
time" while it also reads a time of day and Slurm's days-hours durations, and nothing told
that a clock form such as ``01:30:00``, a 90-minute duration to ``--time-limit``, is a time
of day to ``--since``. Its help now lists exactly what :func:`parse_since` reads, and each
example it gives reads as the help says."""

from __future__ import annotations

from datetime import datetime

import pytest
import typer
from typer.testing import CliRunner

from danlu.cli import events as events_cli
from danlu.cli import jobs as jobs_cli
from danlu.core.units import SINCE_FORMS, parse_since

NOW = datetime(2026, 12, 4, 12, 0).astimezone().timestamp()


def _help(register: object, command: str) -> str:
    app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
    register(app)  # type: ignore[operator]
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return " ".join(result.stdout.replace("│", " ").split())  # one line, without the boxes


@pytest.mark.parametrize(
    ("register", "command"),
    [(jobs_cli.register, "ls"), (events_cli.register, "events")],
    ids=["ls", "events"],
)
def test_the_since_help_says_every_form_it_reads(register: object, command: str) -> None:
    text = _help(register, command)
    assert " ".join(SINCE_FORMS.split()) in text
    assert "a time of day HH:MM or HH:MM:SS" in text and "never a duration here" in text
    assert "D-HH[:MM[:SS]]" in text


@pytest.mark.parametrize(
    ("text", "back"),
    [("90", 90), ("30m", 1800), ("1h30m", 5400), ("1-12", 129_600), ("1-12:30:00", 131_400)],
)
def test_the_help_s_durations_read_back_from_now(text: str, back: float) -> None:
    assert text in SINCE_FORMS
    assert parse_since(text, NOW, "--since") == NOW - back


def test_the_help_s_clock_forms_read_as_times_of_day() -> None:
    assert (
        parse_since("02:00", NOW, "--since") == datetime(2026, 12, 4, 2, 0).astimezone().timestamp()
    )
    # a clock form is the last such time of day, not a duration back from now
    assert parse_since("01:30:00", NOW, "--since") == (
        datetime(2026, 12, 4, 1, 30).astimezone().timestamp()
    )
    assert parse_since("13:00:00", NOW, "--since") == (
        datetime(2026, 12, 3, 13, 0).astimezone().timestamp()
    )


def test_the_help_s_dates_read_as_local_time_unless_they_have_an_offset() -> None:
    assert (
        parse_since("2026-12-01", NOW, "--since") == datetime(2026, 12, 1).astimezone().timestamp()
    )
    local = datetime(2026, 12, 1, 2, 0).astimezone().timestamp()
    assert parse_since("2026-12-01T02:00", NOW, "--since") == local
    assert parse_since("2026-12-01T02:00Z", NOW, "--since") == 1_796_090_400.0
