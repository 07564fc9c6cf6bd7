"""Text from a model or a file, made safe for the two places it lands as plain characters: a spreadsheet and
a terminal. Both rules are pure and idempotent (applying one twice changes nothing more), and neither raises.

**CSV cells** (:func:`csv_cell`) follow OWASP's "CSV Injection" rule: a spreadsheet that opens a CSV file
evaluates a cell whose first character is ``=``, ``+``, ``-`` or ``@`` as a formula (``=HYPERLINK(...)``,
``@SUM(...)``, DDE payloads), and a leading tab or carriage return hides such a character from a naive check
while some programs still skip it and evaluate the rest. Such a cell is prefixed with a single quote ``'``,
which every spreadsheet shows as "this is text" and does not evaluate. We also neutralize a leading ``\\n``
(the same trick as ``\\r``) and the full-width forms ``＝ ＋ － ＠`` (U+FF1D, U+FF0B, U+FF0D, U+FF20), which
some spreadsheets fold to their ASCII twins when they parse input. Only *string* cells pass through here:
numbers the analysis writes as numbers (a negative delta, say) are not strings and stay numbers.

**Terminal text** (:func:`terminal_text`) shows every character a terminal would act on instead of print: the
C0 controls U+0000–U+001F (ESC starts a sequence that can retitle the window or clear the screen, BEL rings, CR
overwrites the line; even ``\\n`` and ``\\t`` inside a name are shown, so one name stays on one line), DEL
U+007F, the C1 controls U+0080–U+009F (U+009B is a one-character CSI on some terminals), the Unicode bidi
embeddings, overrides and isolates U+202A–U+202E and U+2066–U+2069 ("Trojan Source", CVE-2021-42574: they
reorder what is displayed), the line and paragraph separators U+2028/U+2029 (line breaks to ``str.splitlines``
and to some viewers), and lone surrogates U+D800–U+DFFF (Python's ``surrogateescape`` form of file names that
are not UTF-8, which cannot be encoded to a UTF-8 stream). Each is written as Python's ``ascii()`` writes it
(``\\x1b``, ``\\n``, ``\\u202e``, ``\\udcff``); every other character, non-ASCII letters included, is kept.
A backslash itself is kept as it is (file paths on Windows carry them), so the rendering is for reading, not
reversible: the JSON output carries exact names.
"""

from __future__ import annotations

import re

# First characters a spreadsheet may read as the start of a formula (OWASP), with their full-width twins.
_FORMULA_START = frozenset("=+-@\t\r\n\uff1d\uff0b\uff0d\uff20")

# C0, DEL + C1, bidi embeddings/overrides, bidi isolates, line/paragraph separators, lone surrogates.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u2028\u2029\ud800-\udfff]")


def csv_cell(text: str) -> str:
    """``text`` with a leading ``'`` when its first character could start a spreadsheet formula (OWASP)."""
    return "'" + text if text[:1] in _FORMULA_START else text


def _escaped(match: re.Match[str]) -> str:
    return ascii(match.group())[1:-1]  # ascii("\x1b") == "'\\x1b'": the escape without its quotes


def terminal_text(text: str) -> str:
    """``text`` with control, bidi-override and lone-surrogate characters written as backslash escapes."""
    return _UNPRINTABLE.sub(_escaped, text)
