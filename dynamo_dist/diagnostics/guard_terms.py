"""Failed guards in user terms.

Dynamo reports a recompile as the first guard of the cached graph that
failed, as code: ``0/0: ___check_obj_id(pg, 1403...)``. For the objects
dynamo_dist guards, ``guards/_notes.py`` records the value each guarded
source had in every compile (and the recording backend records DTensor graph
inputs); comparing the old compile's value with the new one gives the
sentence: "`pg` is a different process group (size 4 -> 2)".
"""

from __future__ import annotations

import re
from typing import Any

import torch.distributed as dist

from .. import _compat as C
from .rank_lists import compact_ranks, ranks_text

# value summaries, JSON-friendly: what a folded answer can depend on.


def summarize(tracked: str, value: Any) -> dict[str, Any]:
    if tracked == "mesh":
        return mesh_summary(value)
    if tracked == "placement":
        return {"repr": repr(value)}
    if tracked in ("process_group", "world"):
        return group_summary(value)
    if tracked == "dtensor":
        return {"placements": [repr(p) for p in value.placements], "mesh": mesh_summary(value.device_mesh)}
    return {"repr": repr(value)}


def mesh_summary(mesh: Any) -> dict[str, Any]:
    try:
        coordinate = mesh.get_coordinate()
    except Exception:
        coordinate = None
    return {
        "device_type": mesh.device_type,
        "shape": list(mesh.shape),
        "dim_names": list(mesh.mesh_dim_names) if mesh.mesh_dim_names else None,
        "groups": list(C.distributed.mesh_dim_group_names(mesh)),
        "rank_map": compact_ranks(list(C.distributed.mesh_rank_map(mesh))),
        "coordinate": list(coordinate) if coordinate is not None else None,
    }


def group_summary(pg: Any) -> dict[str, Any]:
    try:
        ranks = list(dist.get_process_group_ranks(pg))
    except Exception:
        ranks = None
    return {"name": getattr(pg, "group_name", "?"), "size": pg.size(), "ranks": compact_ranks(ranks), "id": id(pg)}


def describe_value(tracked: str, info: dict[str, Any]) -> str:
    """A guarded value in one phrase (for the report's guard list)."""
    if tracked == "mesh":
        return f"{info['device_type']} mesh {_mesh_shape(info)} on groups {info['groups']}"
    if tracked in ("process_group", "world"):
        return f"process group '{info['name']}' (size {info['size']}, ranks {ranks_text(info['ranks'])})"
    if tracked == "dtensor":
        return f"DTensor {_tuple(info['placements'])} on mesh {_mesh_shape(info['mesh'])}"
    return info.get("repr", "?")


# -- sources -----------------------------------------------------------------


def strip_scope(source_name: str) -> str:
    """``L['x'].placements[0]`` -> ``x.placements[0]``, as Dynamo prints guards."""
    return re.sub(r"L\[\s*['\"](.*?)['\"]\s*\]", r"\1", source_name)


def phrase(source: str, tracked: str) -> str:
    """How to name a (stripped) source to the user."""
    if tracked == "world" or source.endswith("GroupMember.WORLD"):
        return "the default process group (WORLD)"
    m = re.match(r"^(.*?)(?:\._spec)?\.placements\[(\d+)\]$", source)
    if m:
        return f"placement {m.group(2)} of `{_name(m.group(1))}`"
    m = re.match(r"^(.*?)(?:\.device_mesh|\._spec\.mesh)$", source)
    if m:
        return f"the mesh of `{_name(m.group(1))}`"
    return f"`{_name(source)}`"


def _name(source: str) -> str:
    m = re.match(r"^G\[['\"](.*?)['\"]\](.*)$", source)
    return f"{m.group(1)}{m.group(2)} (global)" if m else source


def mentioned(text: str, sources: list[str]) -> list[str]:
    """The sources (longest first, no overlaps) that ``text`` names."""
    found: list[str] = []
    for source in sorted(sources, key=len, reverse=True):
        pattern = r"(?<![\w.'\]])" + re.escape(source) + r"(?![\w])"
        if re.search(pattern, text) and not any(source in f for f in found):
            found.append(source)
    return found


# -- differences ---------------------------------------------------------------


def explain_failure(guard: str, old: dict[str, tuple[str, dict]], new: dict[str, tuple[str, dict]]) -> str | None:
    """The failed ``guard`` (Dynamo's text, scope stripped) in user terms, from
    the notes of the old and new compile ({stripped source: (tracked, summary)});
    None when no note explains it."""
    sources = mentioned(guard, list(old))
    if not sources and "__dtensor_spec_" in guard:
        # Stock's DTensor spec guard does not name its tensor: report the
        # DTensor inputs whose placements or mesh changed.
        sources = [s for s, (tracked, info) in old.items()
                   if tracked == "dtensor" and new.get(s, (tracked, None))[1] != info]
    parts = [_difference(s, old[s][0], old[s][1], new.get(s, (None, None))[1]) for s in sources]
    return "; ".join(parts) if parts else None


def _difference(source: str, tracked: str, old: dict, new: dict | None) -> str:
    name = phrase(source, tracked)
    if tracked == "placement":
        if new is None:
            return f"{name} is no longer {old['repr']}"
        return f"{name} changed from {old['repr']} to {new['repr']}"
    if tracked in ("process_group", "world"):
        return _group_difference(name, old, new)
    if tracked == "mesh":
        return _mesh_difference(name, old, new)
    if tracked == "dtensor":
        if new is None:
            return f"`{source}` is no longer a DTensor {_tuple(old['placements'])}"
        parts = []
        if old["placements"] != new["placements"]:
            parts.append(f"placements of `{_name(source)}` changed from {_tuple(old['placements'])} "
                         f"to {_tuple(new['placements'])}")
        if old["mesh"] != new["mesh"]:
            parts.append(_mesh_difference(f"the mesh of `{_name(source)}`", old["mesh"], new["mesh"]))
        return "; ".join(parts) or f"`{_name(source)}` has a different DTensor spec"
    return f"{name} changed"


def _group_difference(name: str, old: dict, new: dict | None) -> str:
    if new is None:
        return f"{name} is a different process group (was '{old['name']}', size {old['size']})"
    if old["size"] != new["size"]:
        return f"{name} is a different process group (size {old['size']} -> {new['size']})"
    if old["name"] != new["name"]:
        return (f"{name} is a different process group (group '{old['name']}' ranks {ranks_text(old['ranks'])} -> "
                f"group '{new['name']}' ranks {ranks_text(new['ranks'])})")
    return f"{name} is a different process group object with the same name '{old['name']}'"


def _mesh_difference(name: str, old: dict, new: dict | None) -> str:
    if new is None:
        return f"{name} is no longer the {old['device_type']} mesh {_mesh_shape(old)}"
    if (old["shape"], old["dim_names"]) != (new["shape"], new["dim_names"]):
        return f"{name} changed from {_mesh_shape(old)} to {_mesh_shape(new)}"
    if old["groups"] != new["groups"]:
        dims = [_dim(old, i) for i, (a, b) in enumerate(zip(old["groups"], new["groups"])) if a != b]
        groups = ", ".join(f"'{a}' -> '{b}'" for a, b in zip(old["groups"], new["groups"]) if a != b)
        word = "dim" if len(dims) == 1 else "dims"
        return f"{name} has different process groups on {word} {', '.join(dims)} ({groups})"
    if old["rank_map"] != new["rank_map"]:
        return f"{name} has the same shape but a different rank layout"
    if old["coordinate"] != new["coordinate"]:
        return f"this rank's coordinate in {name} changed from {old['coordinate']} to {new['coordinate']}"
    if old["device_type"] != new["device_type"]:
        return f"{name} changed device type from {old['device_type']} to {new['device_type']}"
    return f"{name} is a different mesh"


def _dim(info: dict, i: int) -> str:
    return f"'{info['dim_names'][i]}'" if info["dim_names"] else str(i)


def _mesh_shape(info: dict) -> str:
    names = info["dim_names"] or list(range(len(info["shape"])))
    return "(" + ", ".join(f"{n}={s}" for n, s in zip(names, info["shape"])) + ")"


def _tuple(items: list[str]) -> str:
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def clean_guard(reason: str) -> tuple[str, str]:
    """Dynamo's recompile reason -> (compile id of the failed entry, the
    guard's first line without Dynamo's trailing source comment)."""
    first = reason.strip().splitlines()[0] if reason.strip() else ""
    m = re.match(r"^(\S+?): (.*)$", first)
    previous, guard = (m.group(1), m.group(2)) if m else ("", first)
    return previous, guard.split("  # ")[0].strip()
