"""A griffe extension: an attribute's ``#:`` comment is its docstring.

The code documents its constants the Sphinx way, with a ``#:`` comment on the lines just
above the assignment::

    #: The cell of a study: trials that differ only in variant and seed.
    CELL_COLUMNS: tuple[str, ...] = ("dataset", "size", "context_length")

griffe reads only a string literal under the assignment, so without this the API pages
would drop every such constant (they show documented members only). An attribute that has
a docstring keeps it.
"""

from __future__ import annotations

import ast

import griffe


def comment_above(lines: list[str], lineno: int) -> str | None:
    """The text of the ``#:`` comment lines just above line ``lineno`` (1-based), or None."""
    found: list[str] = []
    index = lineno - 2  # the line above, 0-based
    while index >= 0 and lines[index].lstrip().startswith("#:"):
        found.insert(0, lines[index].lstrip()[2:].strip())
        index -= 1
    return "\n".join(found) if found else None


class CommentDocstrings(griffe.Extension):
    """Gives each attribute without a docstring the ``#:`` comment above it."""

    def on_instance(self, *, node: ast.AST | griffe.ObjectNode, obj: griffe.Object, **kwargs: object) -> None:
        # on_instance, not on_attribute_instance: it runs before the other extensions'
        # on_instance (listed after this one), so theirs see the docstring too.
        if not obj.is_attribute or obj.docstring is not None or obj.lineno is None or obj.filepath is None:
            return
        lines = obj.lines_collection[obj.filepath] if obj.filepath in obj.lines_collection else None
        text = comment_above(lines, obj.lineno) if lines else None
        if text is not None:
            obj.docstring = griffe.Docstring(text, lineno=obj.lineno - 1, parent=obj)
