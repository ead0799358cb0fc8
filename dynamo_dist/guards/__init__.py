"""Guards for tracked distributed objects.

Each ``install_*`` is called once, when a sourced object is first wrapped, and
installs the cheapest guard that keeps every folded answer sound:

- process group: identity (C++ ``ID_MATCH``); a different group recompiles.
- placement: type (C++ ``TYPE_MATCH``) plus equality of its fields.
- mesh: identity fast path, else a semantic fingerprint (``mesh.MeshFingerprint``, a
  frozen value with named fields, one object per distinct fingerprint).
"""

from .mesh import MeshFingerprint, install_mesh_guard, known_fingerprint, mesh_fingerprint
from .placement import install_placement_guard
from .process_group import install_default_group_guard, install_group_guard

__all__ = [
    "install_mesh_guard",
    "install_placement_guard",
    "install_group_guard",
    "install_default_group_guard",
    "MeshFingerprint",
    "known_fingerprint",
    "mesh_fingerprint",
]
