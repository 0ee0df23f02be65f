"""Text from records (reasons, candidate and problem names, flags, compiler output) made safe to show.

Such text comes from candidates, and is shown, never interpreted: not as rich markup on the
terminal, not as markdown or HTML in the reports, and its control characters (ANSI escape
sequences, bidirectional overrides, line breaks) never reach a screen raw.

- `visible`: control characters written as escapes (`\\x1b`, `\\n`, `\\u202e`); plain text as it is.
- `terminal_text`: a rich `Text` of it, shown literally whatever the console's markup setting.
- `markdown_text`: safe inside a GitHub-flavoured markdown table cell, heading or paragraph.
- `markdown_code`: an inline code span of it (not for table cells: a `|` there still splits them).
- `spreadsheet_cell`: a CSV cell a spreadsheet shows as text on one line, never runs as a formula.
"""

from __future__ import annotations

import re
import unicodedata
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pandas import DataFrame
    from rich.text import Text

# Categories whose characters do something other than show a glyph: controls (C0, DEL, C1: ESC,
# CSI...), formats (bidirectional overrides, zero-width characters), lone surrogates, line and
# paragraph separators.
HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
NAMED_ESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
MARKDOWN_ESCAPES = {
    "\\": "\\\\",
    "|": "\\|",
    "`": "\\`",
    "[": "\\[",
    "]": "\\]",
    "<": "&lt;",
    ">": "&gt;",
    "&": "&amp;",
}
# What markdown_text escapes: a bracket only where it would close a link or image (`](`, `][`);
# with brackets=True (inside a link's own text), every bracket. Emphasis, strikethrough and math
# marks (`*`, `~`, `$`), `_` unless a letter or digit is on both sides (where it never emphasises),
# and a `#` that starts the text or a word (a heading's opening or closing run) are escaped too.
MARKDOWN_SPECIAL = re.compile(r"[\\|`<>&*~$]|_+|(?<!\S)#|\](?=[(\[])")
MARKDOWN_SPECIAL_BRACKETS = re.compile(r"[\\|`<>&*~$\[\]]|_+|(?<!\S)#")
MARKDOWN_LINE_BREAK = "<br>"


def _escape(char: str) -> str:
    if char in NAMED_ESCAPES:
        return NAMED_ESCAPES[char]
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def visible(text: object, *, keep_newlines: bool = False) -> str:
    """`text` (str() of it) with every control character written as a visible escape, as Python's
    repr writes it: ESC becomes `\\x1b`, a newline `\\n` (kept as a line break with `keep_newlines`),
    U+202E `\\u202e`. Printable text, other languages' letters included, is unchanged."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(
        _escape(c) if unicodedata.category(c) in HIDDEN_CATEGORIES and not (keep_newlines and c == "\n") else c
        for c in text
    )


def terminal_text(text: object, style: str = "", *, keep_newlines: bool = False) -> "Text":
    """A rich Text of `visible(text)`: rich prints it as it is (no markup, no emoji codes, no
    highlighting), on any console."""
    from rich.text import Text

    return Text(visible(text, keep_newlines=keep_newlines), style=style)


def markdown_text(text: object, *, brackets: bool = False, line_breaks: bool = True) -> str:
    """`text` as literal markdown, fit for a table cell: `|`, backslashes and backticks escaped (no
    cell split, no code span), `*`, `_`, `~`, `$` and a word's leading `#` escaped (no emphasis,
    strikethrough, math or heading), `<`, `>` and `&` as entities (no HTML tag, no entity), a `]` that
    would close a link or image escaped (every bracket with `brackets`, for text inside a link's
    brackets), each line break as `<br>` (one row stays one row; with `line_breaks` False, as its
    escape `\\n`, for a name, which is one word) and control characters as `visible` writes them."""
    special = MARKDOWN_SPECIAL_BRACKETS if brackets else MARKDOWN_SPECIAL
    lines = str(text).splitlines() if line_breaks else [str(text)]
    return MARKDOWN_LINE_BREAK.join(visible(special.sub(_markdown_escape, line)) for line in lines)


def _markdown_escape(match: "re.Match[str]") -> str:
    found, line = match.group(), match.string
    if found.startswith("_"):
        before, after = line[match.start() - 1 : match.start()], line[match.end() : match.end() + 1]
        return found if before.isalnum() and after.isalnum() else "\\_" * len(found)
    return MARKDOWN_ESCAPES.get(found, "\\" + found)


def markdown_code(text: object) -> str:
    """`text` as an inline code span (shown literally, markdown and HTML alike): fenced by more
    backticks than any run of them inside, line breaks as spaces, control characters as `visible`
    writes them."""
    flat = visible(" ".join(str(text).splitlines()))
    longest, run = 0, 0
    for char in flat:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    fence = "`" * (longest + 1)
    pad = " " if longest or flat.startswith(" ") or flat.endswith(" ") else ""
    return f"{fence}{pad}{flat}{pad}{fence}"


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # what makes a spreadsheet read a cell as a formula


# CSV columns whose text comes from outside
TEXT_COLUMNS = ("problem", "candidate", "reason", "flags", "hardware", "device")


def spreadsheet_safe(frame: "DataFrame") -> "DataFrame":
    """`frame` with each cell of its TEXT_COLUMNS made a `spreadsheet_cell`."""
    columns = [c for c in TEXT_COLUMNS if c in frame.columns]
    return frame.assign(**{c: frame[c].map(spreadsheet_cell) for c in columns}) if columns else frame


def spreadsheet_cell(value: object) -> object:
    """A CSV cell of text that a spreadsheet opens as text, on one line: control characters (ESC,
    line breaks) written as `visible` writes them, and a string that a spreadsheet would read as a
    formula (`=HYPERLINK(...)`, `+cmd|...`, `-2+3`, `@SUM(...)`) gets a leading `'`, the
    spreadsheets' own mark for literal text. Numbers and other values are returned as they are."""
    if not isinstance(value, str):
        return value
    shown = visible(value)
    return "'" + shown if shown.startswith(FORMULA_STARTS) else shown
