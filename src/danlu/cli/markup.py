"""Text from the server or a trace file, made safe to print as Rich markup."""

from __future__ import annotations

from rich.markup import escape

from danlu.core.values import visible


def as_text(value: object) -> str:
    """``value`` as Rich markup that shows it as it is: a name, id, reason, URL or error is
    text (``[/x]`` would make Rich fail, ``[bold]`` would vanish), and its control
    characters are written as escapes (``\\x1b``, ``\\n``), so a stored value or an
    endpoint's reply quoted in one can neither act on the terminal nor split a table's row."""
    return escape(visible(str(value)))
