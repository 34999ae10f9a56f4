"""Finding neighbour layers through entry points (docs/design.md §4), with an in-process override for tests.

The runtime never imports codegen or a backend by name: it asks `importlib.metadata` for the entry points of a
group. `installed(group, name, obj)` adds an in-process plugin for the length of a `with` block, which is how tests
(and embedders) plug in a fake backend or a hand-written lowering without building a distribution.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

BACKENDS: Final = "plygrad.backends"
CODEGEN: Final = "plygrad.codegen"

# (group, name) -> the object, pushed by `installed`; they shadow installed entry points of the same name
_OVERRIDES: dict[tuple[str, str], object] = {}
_LISTENERS: list[Callable[[], None]] = []


@dataclass(frozen=True)
class Plugin:
    """One entry point: `value` is its "module:attr" text (or a repr for in-process ones); `load` imports it;
    `origin` says where it comes from for error messages ("module:attr from distribution D 1.0"))."""

    group: str
    name: str
    value: str
    load: Callable[[], object]
    origin: str = ""


def _installed_entry_points(group: str) -> list[Plugin]:
    found = importlib.metadata.entry_points(group=group)
    return [Plugin(group, ep.name, ep.value, ep.load, _origin(ep)) for ep in found]


def _origin(ep: importlib.metadata.EntryPoint) -> str:
    dist = ep.dist
    return f"{ep.value} from distribution {dist.name} {dist.version}" if dist is not None else ep.value


def _in_process_origin(obj: object) -> str:
    module = getattr(obj, "__module__", None) or type(obj).__module__
    qualname = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    return f"in-process {module}.{qualname}"


def plugins(group: str) -> dict[str, Plugin]:
    """Every plugin of `group` by name: installed entry points, shadowed by in-process ones of the same name."""
    result = {p.name: p for p in _installed_entry_points(group)}
    for (g, name), obj in list(_OVERRIDES.items()):  # a copy: another thread's `installed` may change it meanwhile
        if g == group:
            result[name] = Plugin(group, name, f"<in-process {obj!r}>", _constant(obj), _in_process_origin(obj))
    return result


def describe(group: str, name: str, what: str) -> str:
    """How errors name plugin `name` of `group`: `what 'name' (module:attr from distribution D 1.0)`, so a user
    sees which installed package produced a bad result (just `what 'name'` when no such plugin is found)."""
    plugin = plugins(group).get(name)
    if plugin is None or not plugin.origin:
        return f"{what} {name!r}"
    return f"{what} {name!r} ({plugin.origin})"


def load_callable(group: str, name: str, what: str, hint: str, error: type[Exception]) -> Callable[..., Any]:
    """The callable plugin `name` of `group` (a scheduler, a lowering engine), or `error` saying what was found
    and what to do: `what` names the kind of plugin in messages, `hint` is the advice when `name` is missing."""
    found = plugins(group)
    if name not in found:
        known = ", ".join(sorted(found)) or "none"
        raise error(f"no {group} entry point named {name!r} (found: {known}); {hint}")
    try:
        obj = found[name].load()
    except Exception as exc:
        raise error(f"{what} {name!r} ({found[name].value}) failed to import: {exc}") from exc
    if not callable(obj):
        raise error(f"{what} entry point {name!r} ({found[name].value}) is not callable")
    return obj


def _constant(obj: object) -> Callable[[], object]:
    def load() -> object:
        return obj

    return load


def on_change(listener: Callable[[], None]) -> None:
    """Call `listener` whenever `installed` adds or removes a plugin (caches of discovered plugins reset there)."""
    _LISTENERS.append(listener)


def _changed() -> None:
    for listener in list(_LISTENERS):
        listener()


@contextmanager
def installed(group: str, name: str, obj: object) -> Iterator[None]:
    """Make `obj` the plugin `name` of `group` inside the block, as if a distribution had registered it."""
    key = (group, name)
    previous = _OVERRIDES.get(key, _MISSING)
    _OVERRIDES[key] = obj
    _changed()
    try:
        yield
    finally:
        if previous is _MISSING:
            del _OVERRIDES[key]
        else:
            _OVERRIDES[key] = previous
        _changed()


_MISSING: Final = object()
