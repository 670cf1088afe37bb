"""A Rich table laid out for the width it is printed at: a table where every cell shows
whole, else a record per line (:class:`FittedTable`); the base of ``danlu top``'s, ``danlu
nodes``', ``danlu ls``' and the admin commands' tables. Into a pipe or a file, every table
of the CLI is printed whole instead, one row a line (:func:`print_whole`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.table import Table

NARROW = 120
"""Under this many columns the tables leave out (or stack) what they can spare."""


WIDE = 10_000
"""A width no table reaches: the console width a cell is measured at, whole."""


def needed_width(console: Console, table: Table, floors: Mapping[str, int]) -> int:
    """The narrowest width at which ``table`` (boxed, one space of padding each side of a
    cell) shows every cell whole: its ``no_wrap`` columns as wide as their widest cell, the
    header included, and each other column ``floors[header]`` wide (1 when not there) to
    fold its text in. Narrower, Rich would cut the ``no_wrap`` cells (or the table's right
    edge), or fold a column down to nothing."""
    options = console.options.update_width(WIDE)
    total = len(table.columns) + 1  # the vertical lines
    for column in table.columns:
        if column.no_wrap:
            cells = [column.header, *column.cells]
            total += max(Measurement.get(console, options, cell).maximum for cell in cells)
        else:
            total += floors.get(str(column.header), 1)
        total += 2  # the padding
    return total


def prints_whole(console: Console) -> bool:
    """Whether ``console`` prints whole (:func:`print_whole`): its output is not a terminal (a
    pipe, a file: ``danlu ls | grep PENDING``, ``danlu ls > jobs.txt``), whatever width it
    has there (``COLUMNS``, which tools set for output that is no terminal, as ``watch`` and
    pytest-xdist's workers do). On a terminal ``COLUMNS`` is the width, as Rich takes it."""
    return not console.is_terminal


def whole(console: Console, renderable: RenderableType) -> RenderableType:
    """``renderable`` as :func:`print_whole` prints it into a pipe or a file: a
    :class:`FittedTable` as its :meth:`~FittedTable.whole_table`; a table with no column
    bounded in width (a name's ``max_width``, a width fitted to the terminal), as wide as
    its widest cells, so that no cell folds onto a second line or is cut; a group each of
    its parts so. Anything else (a line of text) as it is. A table given is changed."""
    if isinstance(renderable, FittedTable):
        renderable = renderable.whole_table()
    if isinstance(renderable, Group):
        return Group(*(whole(console, part) for part in renderable.renderables))
    if isinstance(renderable, Table):
        for column in renderable.columns:
            column.width = column.max_width = None
        renderable.width = None
        options = console.options.update_width(WIDE)
        renderable.width = Measurement.get(console, options, renderable).maximum
    return renderable


def print_whole(console: Console, *renderables: RenderableType, **options: Any) -> None:
    """Print ``renderables`` (tables, lines) on ``console``: on a terminal fitted to its
    width, as Rich does; into a pipe or a file (:func:`prints_whole`) each row of a table
    and each line on one line, as wide as it is (:func:`whole`): at the 80 columns Rich
    assumes there, ``danlu ls | grep PENDING`` missed the rows whose reason folded onto a
    second line, ``danlu metrics JOB | cat`` showed ``20:4…`` for a time. ``options`` as
    :meth:`~rich.console.Console.print` takes them (but for ``soft_wrap``, which a pipe's
    output is). Into a pipe or a file no line ends in blanks: a table without borders
    (``danlu show``'s) pads each row to its widest. The tables given are changed."""
    if not prints_whole(console):
        console.print(*renderables, **options)
        return
    shown = [whole(console, renderable) for renderable in renderables]
    options.pop("crop", None)  # soft-wrapped: never cropped
    with console.capture() as captured:  # plain text: no terminal, no colours
        console.print(*shown, **options, soft_wrap=True)  # a title or a line unfolded
    lines = captured.get().split("\n")
    console.out("\n".join(line.rstrip(" ") for line in lines), end="", highlight=False)


class FittedTable:
    """A table laid out for the width it is printed at: :meth:`table`, or, where that
    cannot show every cell whole (:func:`needed_width` with :attr:`FLOORS`), :meth:`lines`,
    one record per line, folded onto more lines when long: never cut or cropped."""

    FLOORS: Mapping[str, int] = {}
    """The least width (in characters) of each column that folds its text, by header: a
    table that cannot give them this much is shown as lines."""

    def table(self, width: int) -> Table:
        """The table for a console ``width`` wide."""
        raise NotImplementedError

    def whole_table(self) -> Table:
        """The table with all its columns, for an output of any width (:func:`whole`)."""
        return self.table(WIDE)

    def lines(self, width: int) -> RenderableType:
        """The records one per line, for a console ``width`` wide."""
        raise NotImplementedError

    def layout(self, console: Console, width: int) -> RenderableType:
        """:meth:`table` when it fits in ``width``, else :meth:`lines`."""
        table = self.table(width)
        return table if needed_width(console, table, self.FLOORS) <= width else self.lines(width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.layout(console, options.max_width)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.layout(console, options.max_width))
