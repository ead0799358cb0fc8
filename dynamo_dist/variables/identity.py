"""``a is b`` where either side is a tracked object, on every release.

The answer folds to a constant; what keeps it sound is which guards fix the
*objects* (not just their values) on each side. Every tracker says that of
itself (``identity()``):

- ``PINNED``: the guards fix the object itself. A process group passed in
  (``ID_MATCH``), or taken from a guarded mesh (``mesh.get_group(d)``: the
  mesh guard holds each dim's group name, and a name resolves to one live
  group); a class; ``dist.group.WORLD``.
- ``FRESH``: built inside the region (``Shard(0)``): it is only itself.
- ``BY_VALUE``: the guards fix its value, not which object it is: a mesh
  (an equal new mesh passes its guard) or a placement passed in, a submesh.

Two pinned sides, or a fresh one, need nothing more: the answer cannot change
while the guards hold, so ``mesh.get_group(0) is pg`` does not pin the mesh.
Sides of different exact types are never the same object (each side's type is
guarded). Otherwise the relation itself is guarded: ``m1 is m2`` between two
inputs becomes the guard ``m1 is m2`` (or ``is not``); where a side has no
source of its own (``m1["tp"] is m2["tp"]``), the inputs it derives from are
pinned by identity. A side the program made from guarded values without a
tracked input behind it (the placements of a DTensor computed in the region,
which torch's own tuple comparisons test with ``is``) keeps the identity
that code gave it, unguarded, as in stock. Two objects derived from the same one (``m["tp"] is
m["tp"]``, ``m["dp", "tp"] is m``) answer the same for every object its
guard admits.
"""

from __future__ import annotations

import enum
from typing import Any

from .. import _compat as C
from .breaks import Break, graph_break, log


class Identity(enum.Enum):
    PINNED = "pinned"
    FRESH = "fresh"
    BY_VALUE = "by value"


def identity_of(vt: Any) -> Identity:
    own = getattr(vt, "identity", None)
    if own is not None:
        return own()
    # Stock trackers: a class or a constant is guarded as itself.
    value = C.dynamo.known_value(vt)
    if isinstance(value, type) or C.dynamo.is_literal(value):
        return Identity.PINNED
    return Identity.BY_VALUE


def is_ours(vt: Any) -> bool:
    return getattr(vt, "identity", None) is not None


def _root(vt: Any) -> Any:
    rebuild = getattr(vt, "rebuild", None)
    return rebuild.root if rebuild is not None else vt


def _same_root(left: Any, right: Any) -> bool:
    # Both derived from one tracked object (or one from the other): the
    # answer is a function of that object alone, the same for every object
    # its guard admits (``m["tp"] is m["tp"]``, ``m["dp", "tp"] is m``).
    return _root(left) is _root(right)


def identity_source(vt: Any) -> Any:
    """The source whose object identity fixes ``vt``'s: its own, or that of
    the input it was derived from."""
    if vt.source is not None:
        return vt.source
    rebuild = getattr(vt, "rebuild", None)
    root = rebuild.root if rebuild is not None else None
    return identity_source(root) if root is not None and is_ours(root) else None


def fold_is(left: Any, right: Any) -> bool | None:
    """``left is right`` at trace time with the guards that keep it true, or
    None when neither side is ours (or a side has no known object)."""
    if not (is_ours(left) or is_ours(right)):
        return None
    if left is right:
        return True
    for side, other in ((left, right), (right, left)):
        known_with = getattr(side, "identity_known_with", None)
        if known_with is not None and not known_with(other):
            graph_break(Break.IDENTITY_UNKNOWN, context=f"{left} is {right}")
    lv, rv = C.dynamo.known_value(left), C.dynamo.known_value(right)
    if lv is C.dynamo.NO_KNOWN_VALUE or rv is C.dynamo.NO_KNOWN_VALUE:
        return None
    same = lv is rv
    kinds = {identity_of(left), identity_of(right)}
    if type(lv) is not type(rv) or Identity.FRESH in kinds or kinds == {Identity.PINNED}:
        return same
    if _same_root(left, right):
        return same
    roots = identity_source(left), identity_source(right)
    if None in roots:
        # A side the program made from guarded values (the placements of a
        # DTensor computed in the region): its identity follows that code.
        return same
    if left.source is not None and right.source is not None:
        log.debug("guard: `%s` %s `%s`", left.source.name, "is" if same else "is not", right.source.name)
        C.dynamo.guard_same_object(left.source, right.source, same)
        return same
    for side, root in zip((left, right), roots):
        if identity_of(side) is not Identity.PINNED:
            C.dynamo.guard_identity(root)
    return same


def fold_is_tracker(left: Any, right: Any) -> Any:
    """``fold_is`` as a constant tracker (None when it does not answer)."""
    same = fold_is(left, right)
    return None if same is None else C.dynamo.constant(same)
