"""An MkDocs hook: short code in a table cell stays on one line.

A narrow table column breaks a code span wherever a browser may (after each ``-`` of
``--tracking-uri``), which reads as two words. A span of at most :data:`MAX_WHOLE_CHARS`
characters (a flag, a variable, a file name) gets the class ``whole`` (``white-space:
nowrap`` in docs/stylesheets/extra.css); a longer one (a test id, a command) may still wrap,
or the table could not fit the column.
"""

from __future__ import annotations

import re

#: Longest code span of a table cell that is never broken.
MAX_WHOLE_CHARS = 32

_CELL = re.compile(r"(<t[dh][^>]*>)(.*?)(</t[dh]>)", re.S)
_CODE = re.compile(r"<code>([^<]*)</code>")


def whole_code(cell: str) -> str:
    """``cell``'s HTML with each short ``<code>`` span marked ``class="whole"``."""
    return _CODE.sub(
        lambda m: f'<code class="whole">{m.group(1)}</code>' if len(m.group(1)) <= MAX_WHOLE_CHARS else m.group(0),
        cell,
    )


def on_page_content(html: str, **kwargs: object) -> str:
    """MkDocs' hook: runs on each page's HTML body."""
    return _CELL.sub(lambda m: m.group(1) + whole_code(m.group(2)) + m.group(3), html)
