"""A griffe extension: Sphinx cross-reference roles in docstrings read as code.

The docstrings name other objects the Sphinx way (``:func:`build_model```,
``:mod:`~harness.analysis.results```), which Markdown would show as the raw role. This
turns each role into a code span of its target; a leading ``~`` keeps only the last
component, as Sphinx shows it.
"""

from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|meth|class|mod|data|attr|exc|obj|const):`(~?)([^`]+)`")


def plain_roles(text: str) -> str:
    """``text`` with every Sphinx role replaced by a code span of its target."""
    return ROLE.sub(lambda m: f"`{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}`", text)


class SphinxRoles(griffe.Extension):
    """Rewrites the roles of every docstring griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: object) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain_roles(obj.docstring.value)
