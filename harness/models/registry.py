"""A registry of named things: one per slot of the zoo (positions, gates, scorings) and for the
sizes and the variants (data, no torch import).

A component registers itself where it is defined, by decorator, and nothing else lists it::

    @POSITIONS.register("rope")
    class RotaryPositionalEncoding(PositionalEncoding): ...

``get(name)`` returns it or raises :class:`~harness.errors.InputError` naming the slot and
listing the known names; ``names()`` lists them in registration order; a name registered twice
is refused. A registry may name the modules that fill it (``loads``): they are imported on the
first question asked of it, so that a registry declared in a light module (the slots' in
:mod:`harness.models.slots`) costs nothing (no torch) until a name is looked up.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Iterator, Mapping
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from harness.errors import InputError

T = TypeVar("T")


class Registry(Generic[T]):
    """Names -> things of one kind, in registration order.

    Parameters
    ----------
    kind : str
        What a name names, as the messages say it (``"position"``, ``"model size"``).
    plural : str, optional
        ``kind`` in the plural (default ``kind + "s"``): "known positions: ...".
    hint : str
        Appended to the unknown-name message: what else the user may name.
    loads : tuple of str
        Modules whose import registers the entries (imported on the first question).

    Examples
    --------
    >>> shapes = Registry[int]("shape")
    >>> shapes.add("square", 4)
    4
    >>> shapes.names(), "square" in shapes
    (('square',), True)
    >>> shapes.get("circle")
    Traceback (most recent call last):
    ...
    harness.errors.InputError: unknown shape 'circle'; known shapes: square
    """

    def __init__(self, kind: str, *, plural: str | None = None, hint: str = "", loads: tuple[str, ...] = ()) -> None:
        self.kind = kind
        self.plural = plural or f"{kind}s"
        self.hint = hint
        self._loads = loads
        self._loaded = not loads
        self._entries: dict[str, T] = {}
        self._view: Mapping[str, T] = MappingProxyType(self._entries)  # live: later registrations show

    def _load(self) -> None:
        """Import the modules that fill this registry, once (their decorators call :meth:`add`)."""
        if not self._loaded:
            self._loaded = True  # first: a module that asks while it is imported gets what is there
            for module in self._loads:
                importlib.import_module(module)

    def add(self, name: str, value: T) -> T:
        """Register ``value`` under ``name``; InputError when the name is taken."""
        if not isinstance(name, str) or not name:
            raise InputError(f"a {self.kind} needs a non-empty name, got {name!r}")
        if name in self._entries:
            raise InputError(
                f"{self.kind} {name!r} is registered already ({_shown(self._entries[name])}); choose another name"
            )
        self._entries[name] = value
        return value

    def register(self, name: str) -> Callable[[T], T]:
        """:meth:`add` as a decorator: ``@registry.register("name")`` above a class."""

        def decorate(value: T) -> T:
            return self.add(name, value)

        return decorate

    def remove(self, name: str) -> T:
        """Take ``name`` out again (a test's own component, when the test ends)."""
        return self._entries.pop(name)

    def get(self, name: str) -> T:
        """The entry ``name``; InputError naming the kind and listing the known names."""
        self._load()
        if isinstance(name, str) and name in self._entries:
            return self._entries[name]
        raise InputError(f"unknown {self.kind} {name!r}; known {self.plural}: {', '.join(self._entries)}{self.hint}")

    def names(self) -> tuple[str, ...]:
        """Every registered name, in registration order."""
        self._load()
        return tuple(self._entries)

    def items(self) -> tuple[tuple[str, T], ...]:
        """(name, entry) pairs, in registration order."""
        self._load()
        return tuple(self._entries.items())

    def where(self, test: Callable[[T], bool]) -> Selection[T]:
        """The names whose entry passes ``test`` (``takes_mope_init``), read when used: live and light."""
        return Selection(self, test)

    @property
    def entries(self) -> Mapping[str, T]:
        """A read-only, live mapping name -> entry (``VARIANTS``, ``SIZES``: a dict's reading API)."""
        self._load()
        return self._view

    def __contains__(self, name: Any) -> bool:
        self._load()
        return isinstance(name, str) and name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __repr__(self) -> str:
        state = ", ".join(self._entries) if self._loaded else f"not loaded yet: {', '.join(self._loads)}"
        return f"Registry({self.kind!r}: {state})"


class Selection(Collection[str], Generic[T]):
    """The names of a :class:`Registry` whose entries pass a test, in registration order, read
    from the registry each time they are used (so a module may hold one without loading it)."""

    def __init__(self, registry: Registry[T], test: Callable[[T], bool]) -> None:
        self._registry = registry
        self._test = test

    def __contains__(self, name: Any) -> bool:
        return name in self._registry and bool(self._test(self._registry.get(name)))

    def __iter__(self) -> Iterator[str]:
        return iter([name for name, value in self._registry.items() if self._test(value)])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"Selection({self._registry.kind!r}: {', '.join(self)})"


def _shown(value: Any) -> str:
    return getattr(value, "__qualname__", None) or repr(value)


__all__ = ["Registry", "Selection"]
