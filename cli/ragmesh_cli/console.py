"""The CLI's two consoles: `err` (stderr: progress, tables for people, errors) and `out` (stdout: results a
script reads). Markup is off on both, so names, messages and result texts print as they are: a "[...]" in a
document is text, never a style."""

from __future__ import annotations

from rich.console import Console
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

err = Console(stderr=True, markup=False)
out = Console(markup=False)

_INDENT = 2


def print_table(console: Console, table: Table) -> None:
    """`table` as it is when it fits the terminal, else one record per row (its first cell as the record's head,
    then `column: value` pairs wrapped at the width), so that no column is squeezed to `col…`."""
    natural = Measurement.get(console, console.options.update_width(100_000), table).maximum
    if natural <= console.width:
        console.print(table)
        return
    headers = [str(column.header) for column in table.columns]
    rows = zip(*([str(cell) for cell in column.cells] for column in table.columns), strict=True)
    if table.title:
        console.print(Text(str(table.title), style="bold"))
    for row in rows:
        console.print(Text(f"{headers[0]} {row[0]}", style="bold"))
        # Whole `column: value` pairs, as many to a line as fit (a pair is never split).
        lines = [""]
        for pair in (f"{h}: {v}" for h, v in zip(headers[1:], row[1:], strict=True)):
            joined = f"{lines[-1]}   {pair}" if lines[-1] else pair
            if len(joined) + _INDENT > console.width and lines[-1]:
                lines.append(pair)
            else:
                lines[-1] = joined
        for line in lines:
            console.print(Padding(Text(line), (0, 0, 0, _INDENT)), crop=False)
