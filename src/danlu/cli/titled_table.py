"""The titled tables of the admin commands (users, tokens, projects), ``danlu webhook`` and
``danlu sweep`` (:class:`TitledTable`): laid out for the width they are printed at, text
left-aligned and numbers right-aligned, the first column never cut."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from rich.cells import cell_len
from rich.console import Group, JustifyMethod, RenderableType
from rich.table import Table
from rich.text import Text

from danlu.cli.fitted_table import FittedTable


def titled_table(
    title: str,
    columns: Sequence[str],
    rows: Iterable[Sequence[str]],
    floors: Mapping[str, int] | None = None,
    numbers: Collection[str] = (),
) -> TitledTable:
    """A table of ``rows`` (Rich markup, as :func:`~danlu.cli.markup.as_text` gives) under
    ``columns``, laid out for the width it is printed at (:class:`TitledTable`; ``floors``:
    the least width of a column, by header, where its header's longest word is too little
    to read it folded, e.g. a URL). ``numbers``: the headers of the columns of numbers
    (counts, quotas, ``3/10``), right-aligned; every other column is text, left-aligned, as
    ``danlu ls``, ``danlu nodes`` and ``danlu sweep ls`` align their columns."""
    return TitledTable(title, columns, rows, floors, numbers)


class TitledTable(FittedTable):
    """A titled table whose first column (the name or id the other commands take) is never
    wrapped or cut, and whose headers never break within a word: on a narrow terminal the
    other columns give way, their text folded onto more lines (a URL, an error), never cut
    with an ellipsis; where even a column as wide as its header's longest word each does not
    fit, one record per line (``name  header: value  ...``)."""

    def __init__(
        self,
        title: str,
        columns: Sequence[str],
        rows: Iterable[Sequence[str]],
        floors: Mapping[str, int] | None = None,
        numbers: Collection[str] = (),
    ) -> None:
        self.title = title
        self.columns = list(columns)
        self.numbers = frozenset(numbers)
        """The headers of the right-aligned columns, of numbers (the others: left)."""
        self.rows = [list(row) for row in rows]
        given = floors or {}
        self.FLOORS = {  # a floor given is no wider than the column's widest cell
            header: max(
                _longest_word(header),
                min([given.get(header, 0), *(_cells(row[i]) for row in self.rows if i < len(row))]),
            )
            for i, header in enumerate(self.columns)
            if i > 0
        }

    def table(self, width: int) -> Table:
        """The table, each column after the first given its header's longest word and then,
        narrowest first, what room ``width`` leaves up to its widest cell."""
        wants = [
            max([_cells(header), *(_cells(row[i]) for row in self.rows if i < len(row))])
            for i, header in enumerate(self.columns)
        ]
        chrome = 3 * len(self.columns) + 1  # a cell's padding and lines
        floors = [self.FLOORS[header] for header in self.columns[1:]]
        widths = fill_widths(floors, wants[1:], width - chrome - wants[0])
        table = Table(title=self.title, title_justify="left")
        for i, column in enumerate(self.columns):
            if i == 0:
                table.add_column(column, justify="left", no_wrap=True, min_width=wants[0])
            else:
                justify: JustifyMethod = "right" if column in self.numbers else "left"
                table.add_column(column, justify=justify, overflow="fold", width=widths[i - 1])
        for row in self.rows:
            table.add_row(*row)
        return table

    def lines(self, width: int) -> RenderableType:
        out: list[RenderableType] = [Text.from_markup(self.title)]
        for row in self.rows:
            line = Text.from_markup(row[0] if row else "", style="bold")
            for header, cell in zip(self.columns[1:], row[1:], strict=False):
                line.append(f"  {Text.from_markup(header).plain}: ")
                line.append_text(Text.from_markup(cell))
            out.append(line)
        return Group(*out)


def _cells(markup: str) -> int:
    """How many terminal cells ``markup`` takes on one line."""
    return Text.from_markup(markup).cell_len


def _longest_word(markup: str) -> int:
    """The cells of the longest word of a header, the least a column may give it."""
    return max((cell_len(word) for word in Text.from_markup(markup).plain.split()), default=1)


def fill_widths(floors: Sequence[int], wants: Sequence[int], room: int) -> list[int]:
    """Widths of columns that each need ``floors[i]`` and want ``wants[i]`` at most, sharing
    ``room``: each its floor, then the rest given one cell at a time to the narrowest column
    still short of what it wants (so that a long URL does not take every cell from a short
    error)."""
    widths = list(floors)
    left = room - sum(widths)
    while left > 0:
        short = [i for i, w in enumerate(widths) if w < wants[i]]
        if not short:
            break
        widths[min(short, key=lambda i: widths[i])] += 1
        left -= 1
    return widths
