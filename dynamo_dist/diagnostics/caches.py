"""Compile-cache outcomes per graph, in plain words (explain with inductor).

Inductor's FX graph cache (one lookup per forward and backward graph) and
the AOTAutograd cache (one per Dynamo graph, holding both) each log a
structured-trace artifact per lookup: ``fx_graph_cache_{hit,miss,bypass}``,
``aotautograd_cache_{hit,miss,bypass}``, with a JSON payload (the bypass
reason, the time a hit saved). ``recording.Recorder`` feeds them here
(``CacheEvents.add``) as torch logs them during the user's real compile; a
cache that is switched off logs nothing, so its state is read from the
config at the graph's compile (``settings``) and said as a bypass.
"""

from __future__ import annotations

import re
from typing import Any

from .._compat.caches import sdpa_backend_calls
from ..caching import key_parts
from ..caching.aot_key import REFUSED
from .report import PLUGIN, CacheOutcome, CapturedGraph

AOT, FX = "aot_autograd", "fx_graph"
CACHE_NAMES = {AOT: "AOTAutograd", FX: "FX graph"}
# DTensor calls stock Dynamo puts in a graph as closures (the AOTAutograd cache refuses them).
_DTENSOR_CALLS = ("from_local", "to_local", "redistribute", "full_tensor", "distribute_tensor", "DTensor")
# The higher-order op Dynamo makes of a custom ``torch.autograd.Function``.
_CUSTOM_FUNCTION_OP = "autograd_function_apply"
_SAC_WITHOUT_HASH = "SAC context_fn does not have a cache_hash attribute"
_UNCACHEABLE_HOP = "Can't cache HigherOrderOperator: "


class CacheEvents:
    """The cache artifacts of one recording, by compile id, in log order."""

    def __init__(self) -> None:
        self.events: dict[str, list[tuple[str, str, dict[str, Any], str]]] = {}
        self.settings: dict[str, dict[str, Any]] = {}  # compile id -> O.compile_cache_settings()
        self._stage: dict[str, str] = {}  # compile id -> the stage inductor's inner compiler started
        self.sources: dict[str, dict[str, Any]] = {}  # cache key -> where its graph came from (compile once)

    def add_source(self, payload: dict[str, Any]) -> None:
        """A compile-once record: where the graph of ``payload["key"]`` came from."""
        self.sources[str(payload.get("key"))] = payload

    def stage_starts(self, compile_id: str, stage: str) -> None:
        """Inductor's inner compiler got this graph's ``stage``: the FX-graph
        lookup that follows is that stage's. (An AOTAutograd hit loads forward,
        then backward, with no inner compile: then the order tells.)"""
        self._stage[compile_id] = stage

    def add(self, compile_id: str, cache: str, state: str, payload: dict[str, Any]) -> None:
        stage = self._stage.pop(compile_id, "") if cache == FX else ""
        self.events.setdefault(compile_id, []).append((cache, state, payload, stage))

    def fill(self, graph: CapturedGraph, mode: str) -> None:
        """``graph.cache``: its outcomes (AOTAutograd first, then forward and
        backward FX graphs), with a cache that was off said as a bypass."""
        cid = graph.compile_id
        settings = self.settings.get(cid, {})
        where = settings.get("dir", "the cache dir")
        aot: list[CacheOutcome] = []
        fx: list[CacheOutcome] = []
        for cache, state, payload, stage in self.events.get(cid, []):
            if cache == FX and not stage:
                stage = "backward" if any(o.stage == "forward" for o in fx) else "forward"
            reason, detail = lookup_reason(cache, state, payload, where, mode)
            source = describe_source(self.sources.get(str(payload.get("key"))))
            (aot if cache == AOT else fx).append(CacheOutcome(cache, stage, state, reason, detail, source))
        lowered = bool(fx) or any(s in graph.stages for s in ("forward", "backward"))
        if not aot and lowered and not settings.get(AOT, True):
            aot.append(CacheOutcome(AOT, "", "bypass", _off(AOT, settings)))
        if not settings.get(FX, True):
            seen = {o.stage for o in fx}
            fx += [CacheOutcome(FX, s, "bypass", _off(FX, settings))
                   for s in ("forward", "backward") if s in graph.stages and s not in seen]
        graph.cache = aot + sorted(fx, key=lambda o: o.stage != "forward")
        traced = any(s in graph.stages for s in ("forward", "backward"))
        if any(o.cache == AOT and o.state == "hit" for o in aot) and not traced and not graph.note:
            graph.note = ("AOTAutograd cache hit: its forward/backward graphs were loaded, not traced, and torch "
                          "logged no printed copy, so their collectives are not listed (a fresh "
                          "TORCHINDUCTOR_CACHE_DIR shows them)")


def describe_source(payload: dict[str, Any] | None) -> str:
    """Where a graph came from, from its compile-once record."""
    if not payload:
        return ""
    text = str(payload.get("source", ""))
    extra = []
    if payload.get("waited_s"):
        extra.append(f"waited {payload['waited_s']:.1f} s")
    if payload.get("bytes"):
        extra.append(f"{payload['bytes'] / 1024:.0f} KiB")
    if payload.get("abandoned"):
        extra.append(f"not shared: {payload['abandoned']}")
    return f"{text} ({', '.join(extra)})" if extra else text


def _off(cache: str, settings: dict[str, Any]) -> str:
    if settings.get("force_disable_caches"):
        return f"{CACHE_NAMES[cache]} cache disabled (torch.compiler.config.force_disable_caches=True)"
    if cache == FX:
        return "FX graph cache disabled (torch._inductor.config.fx_graph_cache=False)"
    return "AOTAutograd cache disabled (torch._functorch.config.enable_autograd_cache=False)"


def lookup_reason(cache: str, state: str, payload: dict[str, Any], where: str, mode: str) -> tuple[str, str]:
    """(reason in plain words, torch's own reason) for one lookup."""
    if state == "hit":
        saved_s = payload.get("time_saved_ns", 0) / 1e9 or payload.get("time_saved_ms", 0) / 1e3
        return (f"saved {saved_s:.1f} s of compile" if saved_s else ""), ""
    if state == "miss":
        if payload.get("cache_status_detailed") == "guard_miss":
            return (f"entries for this key in {where}, but none for these input sizes "
                    "(their shape guards failed)"), ""
        return _miss_reason(str(payload.get("key", "")), where), ""
    raw = str(payload.get("cache_bypass_reason", "")).strip()
    return _bypass_reason(raw, mode), raw.splitlines()[0][:300] if raw else ""


def _miss_reason(key: str, where: str) -> str:
    """A miss, with the part of the key that differed where the plugin can
    tell (its notes of another key of the same graph in the cache dir)."""
    found = key_parts.differences(key)
    if found is None:
        return (f"no entry for this key in {where} (first compile of this graph, or its code, "
                "mesh/groups/flattened meshes/placements/rank/planner switches, input shapes, torch or config differ)")
    if not found:
        return (f"no entry for this key in {where}; one for this graph in another state has the plugin's parts "
                "(meshes, groups, flattened meshes, planner switches, rank) equal, so its code, placements, input "
                "shapes, torch or config differ")
    return f"no entry for this key in {where}; this graph is stored for another state: " + "; ".join(found)


def _bypass_reason(raw: str, mode: str) -> str:
    raw, _, ours = raw.partition(REFUSED)  # the plugin's reason, where it could not key what torch refused
    target = re.match(r"Unsupported call_function target (.*?)\.\s*\n\s*Function module: (.*?),\s*\n\s*"
                      r"Function name: (.*)", raw, re.S)
    if raw.startswith(_SAC_WITHOUT_HASH):
        return _sac_reason(ours, mode)
    if raw.startswith(_UNCACHEABLE_HOP + _CUSTOM_FUNCTION_OP):  # a Function inside a subgraph
        return _custom_function_reason(ours, mode)
    if target:
        shown, module, name = (t.strip() for t in target.groups())
        if name == _CUSTOM_FUNCTION_OP:
            return _custom_function_reason(ours, mode)
        if f"{module}.{name}" in sdpa_backend_calls():
            return (f"the graph chooses the SDPA backend (`with sdpa_kernel(...)`, recorded as {module}.{name}), "
                    "which the AOTAutograd cache does not accept by default; "
                    + ("dynamo_dist marks it cacheable, keyed by the backends named — is the plugin installed?"
                       if mode != PLUGIN else "dynamo_dist marks it cacheable, yet it was refused (please report it)"))
        known = module not in ("None", "")
        if "<locals>" in shown:  # its qualified name is a chain of <locals>: the name and module say more
            what = f"`{name}` (a closure in {module})" if known else f"`{name}` (a closure)"
        else:
            what = f"{module}.{name}" if known else name
        text = f"the graph calls a function the AOTAutograd cache cannot key: {what}"
        if any(call in shown for call in _DTENSOR_CALLS):
            text += ("; dynamo_dist bakes DTensor calls as baked_ops.call — is the plugin installed?"
                     if mode != PLUGIN else "; a DTensor call dynamo_dist did not bake (please report it)")
        return text
    if raw == "FX graph cache is not enabled":
        return ("the FX graph cache is off (torch._inductor.config.fx_graph_cache=False) and the "
                "AOTAutograd cache stores its graphs there")
    if raw.startswith("Failed to pickle cache key"):
        return "its cache key could not be pickled (an object in the graph or its inputs cannot be)"
    if raw.startswith("Cannot produce stable cache key for unpicklable type"):
        return f"its cache key has no stable form: {raw.rsplit(' ', 1)[-1]} cannot be pickled"
    first = raw.splitlines()[0] if raw else "no reason logged"
    return first[:200]


def _sac_reason(ours: str, mode: str) -> str:
    if ours:
        return ("the graph runs selective activation checkpointing that dynamo_dist cannot key (its policy, "
                f"`context_fn`, or its region: {ours}), so the cache never stores the graph; a policy made of code, "
                "op overloads, plain values, containers and dataclasses of them is keyed, or its author can set "
                "`context_fn.cache_hash`")
    text = ("the graph runs selective activation checkpointing whose policy (`context_fn`) has no `cache_hash`: the "
            "cache cannot key which activations it saves and which it recomputes, so it never stores the graph; the "
            "code that builds the policy can set `context_fn.cache_hash` (torchtitan's SelectiveAC does not)")
    if mode != PLUGIN:
        return text + "; dynamo_dist keys a policy it can describe (its code and the values it reads)"
    return text + "; without selective checkpointing the graph can cache"


def _custom_function_reason(ours: str, mode: str) -> str:
    if ours:
        return ("the graph calls a custom torch.autograd.Function (traced as autograd_function_apply) whose traced "
                f"graphs depend on something the cache key does not hold ({ours}), so the AOTAutograd cache refuses "
                "it; torch's global opt-in (torch._functorch.config.autograd_cache_allow_custom_autograd_functions) "
                "would admit it unchecked")
    text = ("the graph calls a custom torch.autograd.Function (traced as autograd_function_apply), which the "
            "AOTAutograd cache refuses unless you vouch that the Function does nothing its traced graphs do not "
            "show: torch._functorch.config.autograd_cache_allow_custom_autograd_functions = True "
            "(TORCHINDUCTOR_AUTOGRAD_CACHE_ALLOW_CUSTOM_AUTOGRAD=1)")
    if mode != PLUGIN:
        return text + "; dynamo_dist admits, per graph, a Function whose traced graphs the key holds"
    return text
