"""The reversible record every change to torch's global state goes through."""

from __future__ import annotations

from typing import Any

_MISSING = object()


class Patches:
    """A reversible set of changes to torch's global state.

    Every change the package makes to torch (Dynamo hooks, logger levels and
    handlers, config values, ``torch.compile`` while ``explain`` records) goes
    through one of these: ``set``/``set_item`` remember the original the first
    time a target is touched, and ``restore()`` puts every original back, in
    reverse order, exactly (an attribute or key that did not exist is removed
    again). ``uninstall()``, ``explain`` and the CLI commands all rely on it.
    """

    def __init__(self) -> None:
        self._undo: list[tuple[str, Any, Any, Any]] = []
        self._seen: set[tuple[int, str, Any]] = set()

    def __bool__(self) -> bool:
        return bool(self._undo)

    def set(self, owner: Any, name: str, value: Any) -> None:
        """``setattr(owner, name, value)``, remembering the original (from the
        owner's own ``__dict__`` for classes, so an inherited attribute is not
        copied down on restore)."""
        key = (id(owner), "attr", name)
        if key not in self._seen:
            self._seen.add(key)
            original = owner.__dict__.get(name, _MISSING) if isinstance(owner, type) \
                else getattr(owner, name, _MISSING)
            self._undo.append(("attr", owner, name, original))
        setattr(owner, name, value)

    def set_item(self, mapping: Any, key: Any, value: Any) -> None:
        """``mapping[key] = value``, remembering the original entry."""
        seen_key = (id(mapping), "item", key)
        if seen_key not in self._seen:
            self._seen.add(seen_key)
            self._undo.append(("item", mapping, key, mapping.get(key, _MISSING)))
        mapping[key] = value

    def original(self, owner: Any, name: str, default: Any = _MISSING) -> Any:
        """The value ``owner.name`` had before the first ``set``."""
        for how, target, attr, value in self._undo:
            if how == "attr" and target is owner and attr == name:
                return value
        return default

    def restore(self) -> None:
        while self._undo:
            how, target, name, original = self._undo.pop()
            if how == "attr":
                if original is _MISSING:
                    if name in getattr(target, "__dict__", {}):
                        delattr(target, name)
                else:
                    setattr(target, name, original)
            elif original is _MISSING:
                target.pop(name, None)
            else:
                target[name] = original
        self._seen.clear()
