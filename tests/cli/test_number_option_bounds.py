"""Every number flag of the ``danlu`` command line reads its value with the bounds its help
shows: the bounds are stated once (:func:`danlu.cli.options.int_option`,
:func:`~danlu.cli.options.float_option`), not once for the help (``min=``/``max=``) and again
for the parser, where the two could drift apart (a help saying ``1<=x<=1000`` over a parser
taking 5000, or refusing 1000)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import typer

from danlu.cli.main import app
from danlu.cli.options import float_option, int_option

FAR = 10**12
"""A number beyond any bound a flag has: taken by a flag whose help shows no bound."""


def _number_options() -> list[tuple[str, Any]]:
    """(``command flag``, option) for every option of the command tree that takes a number,
    but ``--port`` (its own parser and words: 0..65535, test_up_port_review89)."""
    found: list[tuple[str, Any]] = []

    def walk(command: Any, path: tuple[str, ...]) -> None:
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                walk(sub, (*path, name))
            return
        for param in command.params:
            flag = param.opts[0]
            if param.bare_type() in ("int", "float") and flag != "--port":
                found.append((" ".join((*path, flag)), param))

    walk(typer.main.get_command(app), ())
    return found


NUMBER_OPTIONS = _number_options()


def _refused(parse: Callable[[Any], Any], value: float) -> bool:
    """Whether the option's parser refuses ``value`` (written as the user would): an error
    line and exit 2."""
    try:
        parse(repr(value))
    except typer.Exit as exc:
        assert exc.exit_code == 2
        return True
    return False


def _just_outside(bound: float, whole: bool, direction: int) -> float:
    """The number nearest ``bound`` beyond it (``direction`` -1: below, 1: above)."""
    if whole:
        return bound + direction
    return bound + direction * (abs(bound) * 1e-3 or 1e-9)


def test_the_walk_finds_the_number_options() -> None:
    names = {name for name, _ in NUMBER_OPTIONS}
    assert {"ls --limit", "project add --share", "top --interval", "sim run --nodes"} <= names
    assert len(names) >= 40


@pytest.mark.parametrize(
    "param", [param for _, param in NUMBER_OPTIONS], ids=[name for name, _ in NUMBER_OPTIONS]
)
def test_the_help_bounds_are_the_bounds_read(param: Any) -> None:
    parse = param.type_descriptor.parameter_info.parser
    assert parse is not None, "a number flag is read by int_option's or float_option's parser"
    with pytest.raises(typer.Exit):  # written plainly: 1_0 is no 10
        parse("1_0")
    whole = param.bare_type() == "int"
    low, high = param.min, param.max
    if low is None:
        assert not _refused(parse, -FAR if whole else -float(FAR))
    else:
        assert not _refused(parse, low)
        assert _refused(parse, _just_outside(low, whole, -1))
    if high is None:
        assert not _refused(parse, FAR if whole else float(FAR))
    else:
        assert not _refused(parse, high)
        assert _refused(parse, _just_outside(high, whole, 1))


def test_one_statement_of_the_bounds_gives_both(capsys: pytest.CaptureFixture[str]) -> None:
    """The helpers set the help's bounds and the parser's from the same arguments."""
    limit = int_option("--limit", "-l", help="Newest N.", example="100", low=1, high=1000)
    assert (limit.min, limit.max) == (1, 1000)
    assert limit.parser("1000") == 1000
    with pytest.raises(typer.Exit):
        limit.parser("1001")
    said = "error: --limit: 1001 is out of range; give a whole number from 1 to 1000"
    assert capsys.readouterr().err.startswith(said)
    poll = float_option("--poll", help="Seconds.", example="2", low=0.1)
    assert (poll.min, poll.max) == (0.1, None)
    assert poll.parser("0.1") == 0.1
    with pytest.raises(typer.Exit):
        poll.parser("0.09")
    said = "error: --poll: 0.09 is out of range; give a number of 0.1 or more, e.g. --poll 2"
    assert capsys.readouterr().err.startswith(said)


def test_a_number_option_is_named_by_its_long_flag_first() -> None:
    """The error lines name the flag by its first name: a short one there is a mistake."""
    with pytest.raises(ValueError, match="long flag"):
        int_option("-n", "--tail", help="The last N.", example="20")
