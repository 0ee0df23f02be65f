"""Tables on the terminal: a console as wide as the terminal, and tables laid out to fit it.

A table's columns are as wide as their contents when that fits. Otherwise text columns wrap
(between words where they can), then the least useful columns are left out and named under the
table; a header's words go onto several lines when its column is narrow, a word is never split.
Long free text (reasons) goes under the table as notes, not into a column. Every cell, title and
note is shown literally (harness.views.text.terminal_text).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import TYPE_CHECKING, Mapping, Optional, Sequence, TextIO

from harness.views.text import terminal_text, visible

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.text import Text

DEFAULT_WIDTH = 120  # when stdout is not a terminal and COLUMNS is not set
TEXT_FLOOR = 20  # a text column is not made narrower than this (or its longest word, when shorter)
GAP = 2  # between two columns: the cell's right padding and the separator


@dataclasses.dataclass(frozen=True)
class Column:
    """One column of a fitted table."""

    header: str  # shown over it; its words may go onto several lines, a word is never split
    numeric: bool = False  # right-aligned, never wrapped
    drop: int = 0  # 0: always shown; when the table is too wide, the highest is left out first


def terminal_width(stream: Optional[TextIO] = None) -> int:
    """COLUMNS when set; else the terminal's width when `stream` (stdout by default) is one; else
    DEFAULT_WIDTH."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    stream = stream if stream is not None else sys.stdout
    try:
        if stream.isatty():
            return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        pass
    return DEFAULT_WIDTH


def terminal_console(*, stderr: bool = False) -> "Console":
    """The console the commands print on: as wide as the terminal (terminal_width), and strings
    printed on it are never read as markup or emoji codes, nor highlighted."""
    from rich.console import Console

    return Console(
        stderr=stderr,
        width=terminal_width(sys.stderr if stderr else sys.stdout),
        soft_wrap=False,
        markup=False,
        emoji=False,
        highlight=False,
    )


def _length(text: str) -> int:
    from rich.cells import cell_len

    return cell_len(text)


def _longest_word(text: str) -> int:
    return max((_length(word) for word in text.split()), default=0)


def _bounds(column: Column, cells: Sequence[str]) -> tuple[int, int, int]:
    """How narrow the column can be: (the least: its header's longest word, and its longest cell
    when numeric, else its longest word up to TEXT_FLOOR; before columns are left out: text cells
    up to TEXT_FLOOR unwrapped; nothing wrapped)."""
    longest = max((_length(c) for c in cells), default=0)
    word = _longest_word(column.header)
    low = max(word, longest if column.numeric else min(TEXT_FLOOR, max((_longest_word(c) for c in cells), default=0)))
    unwrapped = max(low, longest if column.numeric else min(TEXT_FLOOR, longest))
    return low, unwrapped, max(unwrapped, longest, _length(column.header))


def _shrink(widths: list[int], floors: Sequence[int], excess: int) -> int:
    """Take up to `excess` off `widths`, one at a time off the widest above its floor; the excess left."""
    while excess > 0:
        shrinkable = [k for k, floor in enumerate(floors) if widths[k] > floor]
        if not shrinkable:
            break
        widest = max(shrinkable, key=lambda k: widths[k])
        widths[widest] -= 1
        excess -= 1
    return excess


def _squeeze(bounds: Sequence[tuple[int, int, int]], room: int, least: bool) -> Optional[list[int]]:
    """Widths within `bounds` that sum to at most `room`: headers wrapped first and text cells past
    TEXT_FLOOR, then (`least`) text cells between words; None when they do not fit."""
    widths = [high for _, _, high in bounds]
    excess = _shrink(widths, [unwrapped for _, unwrapped, _ in bounds], sum(widths) - room)
    if least:
        excess = _shrink(widths, [low for low, _, _ in bounds], excess)
    return widths if excess <= 0 else None


def layout(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int) -> list[tuple[int, int]]:
    """(column index, width) of each column shown in `width` terminal columns, in order: columns
    are left out before short text cells wrap."""
    bounds = [_bounds(column, [row[i] for row in rows]) for i, column in enumerate(columns)]
    shown = list(range(len(columns)))
    while True:
        room = width - GAP * len(shown) + 1
        droppable = [i for i in shown if columns[i].drop]
        widths = _squeeze([bounds[i] for i in shown], room, least=not droppable)
        if widths is not None or not droppable:
            return list(zip(shown, widths if widths is not None else [bounds[i][0] for i in shown]))
        shown.remove(max(droppable, key=lambda i: (columns[i].drop, i)))


def fitted_table(
    title: str,
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    width: int,
    styles: Optional[Sequence[str]] = None,
) -> tuple["RenderableType", list[str]]:
    """`title` on a line of its own (a table's title would wrap at the table's width), then a table
    of `rows` (cells as strings, shown literally) that fits in `width` terminal columns; and the
    headers of the columns left out to make it fit."""
    from rich import box
    from rich.console import Group
    from rich.table import Table

    shown_rows = [[visible(cell) for cell in row] for row in rows]
    chosen = layout(columns, shown_rows, width)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1, 0, 0))
    for index, column_width in chosen:
        column = columns[index]
        table.add_column(
            terminal_text(column.header),
            justify="right" if column.numeric else "left",
            width=column_width,
            overflow="fold",
        )
    for n, row in enumerate(shown_rows):
        table.add_row(*(terminal_text(row[i]) for i, _ in chosen), style=styles[n] if styles else None)
    kept = {i for i, _ in chosen}
    return Group(terminal_text(title, style="bold"), table), [
        column.header for i, column in enumerate(columns) if i not in kept
    ]


def notes(heading: str, by_text: Mapping[str, Sequence[str]]) -> "RenderableType":
    """Notes under a table: `heading`, then one line per text, after the names it belongs to
    ("fast, slow: matched 10 calls"), indented, wrapped between words."""
    from rich.console import Group
    from rich.padding import Padding
    from rich.text import Text

    lines: list[RenderableType] = [terminal_text(heading, style="bold")]
    for text, names in by_text.items():
        line = Text.assemble((visible(", ".join(names)), "bold"), ": ", visible(text))
        lines.append(Padding(line, (0, 0, 0, 2), expand=False))
    return Group(*lines)


def left_out(dropped: Sequence[str], width: int, where: str) -> "Text":
    """The line under a table that names the columns left out for the terminal's width."""
    from rich.text import Text

    return Text(f"left out at {width} columns: {', '.join(dropped)} ({where} has every column)", style="dim")
