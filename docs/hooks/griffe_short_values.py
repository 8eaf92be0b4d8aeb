"""A griffe extension: a constant's value is shown only when it fits on a line.

A registry or a table of words (``VARIANTS``, ``TEST_ABBREVIATIONS``) as its value would
fill the page with source the docstring already describes, in lines no formatter can
break (long strings). A value longer than :data:`MAX_VALUE_CHARS` is shown as ``...``;
short ones (``DEFAULT_TAU_INIT = 0.35``) stay.
"""

from __future__ import annotations

import ast

import griffe

#: Longest value, in characters of source, shown beside a constant's name.
MAX_VALUE_CHARS = 60


class ShortValues(griffe.Extension):
    """Replaces every attribute value longer than :data:`MAX_VALUE_CHARS` with ``...``."""

    def on_attribute_instance(
        self, *, node: ast.AST | griffe.ObjectNode, attr: griffe.Attribute, **kwargs: object
    ) -> None:
        if attr.value is not None and len(str(attr.value)) > MAX_VALUE_CHARS:
            attr.value = "..."
