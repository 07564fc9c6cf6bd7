"""The pieces every HTML page and section shares: the escape for strings the model supplied, and the two colors
of the roofline charts. Apart from ``report/html.py`` so that the sections it embeds (``whatif_text``,
``llm_text``) use them without importing the page they are part of."""

from __future__ import annotations

import html
import re

MEMORY_COLOR, COMPUTE_COLOR = "#2f6fd0", "#e0731b"

_BAD_CHARS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")


def esc(value: object) -> str:
    """Text or attribute content for any string the model supplied; control characters and lone
    surrogates (a file name that is not UTF-8) become U+FFFD so the page stays valid UTF-8 HTML."""
    s = str(value)
    if not s.isprintable():
        s = _BAD_CHARS.sub("\ufffd", s)
    return html.escape(s, quote=True)
