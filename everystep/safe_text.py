"""Text everystep matches, stores or shows, made safe: names and filters that every
database stores as they are (``storable_text``), and messages written for a page, a
terminal or a line of a text log (``printable``, ``escape_controls``).

Values (arguments, results) are not text in this sense: ``everystep.serde`` escapes what
they hold and gives it back unchanged on decode.
"""

from __future__ import annotations

import re

from everystep.errors import EverystepError

# What no database stores as text: NUL (PostgreSQL's text and jsonb refuse it) and lone
# surrogates (what Python makes of bytes that are not UTF-8: no driver encodes them, and
# the JSON of MariaDB and PostgreSQL refuses their escapes).
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable_text(text: str, what: str) -> str:
    """``text`` if every database can store it as it is, else an ``EverystepError``
    naming ``what`` and the position. For names, ids and filters, which are matched as
    they are; values (arguments, results) are escaped instead."""
    found = UNSTORABLE.search(text)
    if found is None:
        return text
    where = f"{what} contains {escape_char(found)} at position {found.start()}"
    if found.group() == "\x00":
        raise EverystepError(
            f"{where}: a NUL character, which PostgreSQL cannot store (refused on every database)"
        )
    raise EverystepError(f"{where}: a lone surrogate, so the text is not valid UTF-8")


def printable(text: str) -> str:
    """``text`` with what no database stores written as ``\\uXXXX``: for messages, which
    are shown and never turned back into values."""
    return UNSTORABLE.sub(escape_char, text)


# The bidi overrides, embeddings and isolates: a page shows text after them in another
# order than it is stored ("exe.txt" as "txt.exe"), so a page shows them escaped.
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")


def for_page(text: str) -> str:
    """``text`` as a page shows it: ``printable``, with the bidi controls written as
    ``\\u202e``; line breaks kept (a traceback is lines)."""
    return _BIDI.sub(escape_char, printable(text))


# What a terminal or a text log line must not receive as it is: C0 controls (line breaks,
# ESC), DEL, C1 controls, the line and paragraph separators, the bidi overrides and
# isolates (which show text in another order than it is), and what ``printable`` escapes.
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def escape_controls(text: str) -> str:
    """``text`` with every control character written as Python writes it in a string
    literal (``\\n``, ``\\x1b``, ``\\u2028``; NUL and lone surrogates as ``printable``
    writes them): for a terminal or a line of a text log, where stored text must not
    start a line, move the cursor or reorder what follows."""
    if text.isprintable():  # the usual case, decided at C speed
        return text
    return _CONTROLS.sub(_escape_control, text)


def _escape_control(found: re.Match[str]) -> str:
    if UNSTORABLE.match(found.group()):
        return escape_char(found)
    return repr(found.group())[1:-1]


def escape_char(found: re.Match[str]) -> str:
    return f"\\u{ord(found.group()):04x}"
