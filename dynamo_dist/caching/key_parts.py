"""The plugin's parts of each AOTAutograd cache key, kept beside the cache so
that a miss can say which of them differed.

A key is a digest: a miss alone cannot say why. While the plugin computes a
key (``aot_key.keyed_graphs``) it notes what it put in: each mesh, by its
dims, as its layout, its groups and its root's flattened meshes, and the
process tag (the planner's switches and the rank). The notes are written to
``<inductor cache dir>/dynamo_dist/key_parts/<graph>/<key>.json``, where
``<graph>`` digests the Dynamo graph's code with the baked calls' digests
left out: the same program, keyed in another process state, lands in the
same folder. On a miss, ``differences(key)`` compares this key's notes with
those of every other key stored for the same graph and names the parts that
differ from the closest one, in ``explain``'s words ("mesh (a=2, b=2, c=2):
flattened meshes ['ab'] here, ['ac'] in the stored entry"). Torch's own parts
of the key (code, input shapes, torch, config) are not noted: where the
plugin's parts are all equal, one of them differs.

Writing is best effort (a read-only cache dir loses the explanation, never
the compile); each file is written whole under a temporary name, then
renamed, so ranks writing at once never leave half a file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
from typing import Any, Iterator

from .. import _compat as C
from ..guards.mesh import known_fingerprint
from . import baked_ops, keys

# The digest a baked call's key ends with (``baked_ops.bake``).
_BAKED_DIGEST = re.compile(r" #[0-9a-f]{32}")
_FOLDER = os.path.join("dynamo_dist", "key_parts")
# Notes of the keys this process computed, by key.
_NOTES: dict[str, dict[str, Any]] = {}


def _mesh_parts(mesh: Any) -> tuple[str, dict[str, Any]]:
    fingerprint = known_fingerprint(mesh, with_coordinate=False)
    names = mesh.mesh_dim_names
    dims = ", ".join(f"{names[i] if names else i}={size}" for i, size in enumerate(mesh.shape))
    return f"mesh ({dims})", {
        "layout and ranks": repr(fingerprint.eq_fields),
        "groups": list(fingerprint.group_names),
        "flattened meshes": [f"{name} on group {groups[0] if groups else '?'}"
                             for name, _, groups in fingerprint.flattened],
    }


def graph_digest(code: str) -> str:
    """The graph's code with the baked calls' digests left out, digested."""
    return hashlib.blake2b(_BAKED_DIGEST.sub("", code).encode(), digest_size=16).hexdigest()


def _baked_meshes(gm: Any) -> list[Any]:
    """The meshes baked into the graph's DTensor calls (their keys name them)."""
    found: list[Any] = []
    for node in gm.graph.nodes:
        for arg in node.args:
            for mesh in getattr(arg, "meshes", ()) if isinstance(arg, baked_ops.BakedKey) else ():
                if not any(m is mesh for m in found):
                    found.append(mesh)
    return found


@contextlib.contextmanager
def noting(gm: Any) -> Iterator[dict[str, Any]]:
    """Note the meshes of the graph's baked calls and those keyed inside the
    block (a DTensor input's mesh); ``record`` files them."""
    meshes = _baked_meshes(gm)
    notes: dict[str, Any] = {"graph": graph_digest(gm.code)}
    with keys.keying_meshes(meshes):
        yield notes
    parts = {"switches and rank": keys.process_tag()}
    for mesh in meshes:
        name, fields = _mesh_parts(mesh)
        parts.update({f"{name}: {field}": value for field, value in fields.items()})
    notes["parts"] = parts


def record(key: str, notes: dict[str, Any]) -> None:
    """File the notes of ``key`` in this process and beside the cache."""
    if "parts" not in notes:
        return
    _NOTES[key] = notes
    folder = os.path.join(C.caches.inductor_cache_dir(), _FOLDER, notes["graph"])
    try:
        os.makedirs(folder, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=folder, suffix=".tmp", delete=False) as f:
            json.dump(notes["parts"], f)
        os.replace(f.name, os.path.join(folder, f"{key}.json"))
    except OSError:
        pass


def _stored(graph: str, key: str) -> list[dict[str, Any]]:
    folder = os.path.join(C.caches.inductor_cache_dir(), _FOLDER, graph)
    found = []
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
        if name.endswith(".json") and name != f"{key}.json":
            try:
                with open(os.path.join(folder, name)) as f:
                    found.append(json.load(f))
            except (OSError, ValueError):
                continue
    return found


def differences(key: str) -> list[str] | None:
    """For a key this process computed: the plugin's parts that differ from
    the closest other key stored for the same graph, one line each; ``[]``
    when one has the same parts (torch's part differs); None when no other
    key of this graph is stored (or this key was not noted)."""
    notes = _NOTES.get(key)
    if notes is None:
        return None
    stored = _stored(notes["graph"], key)
    if not stored:
        return None
    here = notes["parts"]

    def differing(there: dict[str, Any]) -> list[str]:
        return [name for name in sorted(here.keys() | there.keys()) if here.get(name) != there.get(name)]

    closest = min(stored, key=lambda there: len(differing(there)))
    return [f"{name}: {_shown(here.get(name))} here, {_shown(closest.get(name))} in the stored entry"
            for name in differing(closest)]


def _shown(value: Any) -> str:
    if value is None:
        return "absent"
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
