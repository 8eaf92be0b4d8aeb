"""The one exception type for bad user input.

``InputError`` subclasses ``ValueError`` so that library callers can catch it as the
Python convention says, while the CLI turns it into one clear message and exit code 2.
Raise it for anything the *user* got wrong (unknown names, impossible shapes, a corrupt
file, an unreachable address); let programming errors propagate as they are.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad input from the user: the message names the problem and what to do."""
