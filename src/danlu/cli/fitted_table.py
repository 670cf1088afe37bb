"""A Rich table laid out for the width it is printed at: a table where every cell shows
whole, else a record per line (:class:`FittedTable`); the base of ``danlu top``'s, ``danlu
nodes``', ``danlu ls``' and the admin commands' tables."""

from __future__ import annotations

from collections.abc import Mapping

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
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


def print_whole(console: Console, table: Table) -> None:
    """Print ``table`` on ``console``: on a terminal fitted to its width, as Rich does (a
    cell cut to ``0.45…`` where the table is wider); into a pipe or a file, as wide as its
    widest cells, none cut (``danlu metrics JOB | cat`` at the 80 columns a console assumes
    there showed ``20:4…`` for a time, ``grad…`` for a header). ``table`` is changed: its
    width set."""
    if console.is_terminal:
        console.print(table)
        return
    whole = Measurement.get(console, console.options.update_width(WIDE), table).maximum
    table.width = whole
    console.print(table, crop=False)


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
