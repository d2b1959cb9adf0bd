"""Named, user-extensible seams: one :class:`Registry` per kind of thing a spec names by a string.

Mechanisms (what an audit runs), worlds (what a problem is built from), accountants, threshold
strategies and networks (what the pipeline trains) each live in one. Every built-in registers
itself through the same call a user's code makes, so a name a spec gives resolves the same way
whoever registered it; an unknown name is an :class:`~.errors.InputError` (a ``ValueError``)
listing the known ones, never a fallback.

A package outside this one extends the command line the same way: an entry point in the group
``dpaudit_mix.<group>`` (``dpaudit_mix.accountants``, ``.mechanisms``, ``.worlds``,
``.thresholds``, ``.networks``) names a module whose import registers its objects. Entry points
are loaded once, the first time a registry is asked for a name.
"""

from __future__ import annotations

import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from typing import Generic, TypeVar

from .errors import InputError, require

T = TypeVar("T")

#: what a name may look like: it ends up in specs, manifests, file names and `--flag` values.
NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_.")


#: every registered object that is not the package's own: (kind, name, object), whose code an
#: exception came from (:func:`user_code`).
_USER_OBJECTS: list[tuple[str, str, object]] = []
_USER_LOCK = threading.Lock()


def _module_of(obj: object) -> str:
    """The module that defines ``obj`` (a function's, or an instance's class's)."""
    own = getattr(obj, "__module__", None)
    return own if isinstance(own, str) and callable(obj) else type(obj).__module__


def _is_users(obj: object) -> bool:
    module = _module_of(obj)
    return module != "dpaudit_mix" and not module.startswith("dpaudit_mix.")


def user_code(exc: BaseException) -> str | None:
    """Which registered user object's code raised ``exc`` ("the accountant 'mine' (your code,
    its module)"), where its traceback passes through one of its methods (or the registered
    function itself), or a worker's traceback carried as the cause names its module's file;
    None where the failure is the package's own or a library's."""
    with _USER_LOCK:
        owners = list(_USER_OBJECTS)
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        for frame, _ in traceback.walk_tb(current.__traceback__):
            for kind, name, obj in owners:
                if frame.f_locals.get("self") is obj or frame.f_code is getattr(obj, "__code__", None):
                    return f"the {kind} {name!r} (your code, {_module_of(obj)})"
        if type(current).__name__ == "_RemoteTraceback":  # a process pool's worker: its text only
            for kind, name, obj in owners:
                path = getattr(sys.modules.get(_module_of(obj)), "__file__", None)
                if path and f'"{path}"' in str(current):
                    return f"the {kind} {name!r} (your code, {_module_of(obj)})"
        current = current.__cause__ or current.__context__
    return None


def _article(kind: str) -> str:
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


class Registry(Generic[T]):
    """``name → T`` for one ``kind`` of seam (its plugins in entry-point group
    ``dpaudit_mix.<group>``), with ``check`` run on every object registered. ``plugins="on-miss"``
    loads the plugins only when a name is asked that is not registered (a kind whose plugin is
    heavy, loaded only by the spec that names it); ``"first"`` before every answer."""

    def __init__(
        self, kind: str, group: str, check: Callable[[str, T], None] | None = None, plugins: str = "first"
    ) -> None:
        require(plugins in ("first", "on-miss"), f"plugins must be 'first' or 'on-miss', got {plugins!r}")
        self.kind = kind
        self.group = group
        self._check = check
        self._on_miss = plugins == "on-miss"
        self._entries: dict[str, T] = {}
        self._lock = threading.Lock()
        self._plugins_loaded = False
        self._listeners: list[Callable[[], None]] = []

    def register(self, name: str, obj: T, *, replace: bool = False) -> T:
        """Add ``obj`` under ``name`` (``replace``: over an existing one); returns ``obj``."""
        require(
            isinstance(name, str) and bool(name) and set(name) <= NAME_CHARS and len(name) <= 64,
            f"the name of {_article(self.kind)} must be 1-64 characters of lowercase letters, digits, '-', '_' "
            f"or '.', got {name!r}",
        )
        if self._check is not None:
            self._check(name, obj)
        with self._lock:
            require(
                replace or name not in self._entries,
                f"{_article(self.kind).capitalize()} named {name!r} is already registered "
                "(pass replace=True to replace it)",
            )
            self._entries[name] = obj
        with _USER_LOCK:
            _USER_OBJECTS[:] = [u for u in _USER_OBJECTS if u[:2] != (self.kind, name)]
            if _is_users(obj):
                _USER_OBJECTS.append((self.kind, name, obj))
        for listener in self._listeners:
            listener()
        return obj

    def unregister(self, name: str) -> None:
        """Remove ``name`` (a test's or a plugin's own entry; built-ins may be removed too)."""
        with self._lock:
            require(name in self._entries, f"no {self.kind} named {name!r} is registered")
            del self._entries[name]
        with _USER_LOCK:
            _USER_OBJECTS[:] = [u for u in _USER_OBJECTS if u[:2] != (self.kind, name)]
        for listener in self._listeners:
            listener()

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after every change (a cache keyed by name must forget)."""
        self._listeners.append(listener)

    def get(self, name: str) -> T:
        if self._on_miss:
            with self._lock:
                if isinstance(name, str) and name in self._entries:
                    return self._entries[name]
        self._load_plugins()
        with self._lock:
            if isinstance(name, str) and name in self._entries:
                return self._entries[name]
        raise InputError(f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}")

    def names(self) -> tuple[str, ...]:
        self._load_plugins()
        with self._lock:
            return tuple(self._entries)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.names()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def _load_plugins(self) -> None:
        """Import every module the ``dpaudit_mix.<group>`` entry points name (once)."""
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        for point in entry_points(group=f"dpaudit_mix.{self.group}"):
            try:
                point.load()
            except Exception as exc:  # a broken plugin is one clear line, not a traceback
                raise InputError(
                    f"the {self.kind} plugin {point.name!r} ({point.value}) failed to load: {exc}"
                ) from exc
