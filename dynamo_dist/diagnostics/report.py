"""The explain report: plain data (``to_dict()``, JSON-serialisable) that
renders as readable tables (``str(report)``); see ``render.py``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from .graphs import Collective
from .render import _short, render

# The two sides, as explain names them: its modes (``ExplainReport.mode``). PLUGIN is
# also the origin of the plugin's own graph breaks and declined packages, and
# STOCK_DYNAMO the origin of everyone else's.
PLUGIN = "dynamo_dist"
STOCK = "stock torch"
STOCK_DYNAMO = "stock Dynamo"

# A frame's origin under torch's precompile, and what became of what was traced.
TRACED = "traced here"
LOADED = "loaded from Dynamo's cache"
LOADED_THEN_TRACED = "loaded from Dynamo's cache, then traced here"
LOADED_FROM_RANK = "loaded from rank {rank}"  # compile once: another rank of the job traced it
LOADED_FROM_RANK_THEN_TRACED = "loaded from rank {rank}, then traced here"
PACKAGED, DECLINED, NOT_SAVED = "packaged", "declined", "not saved"


@dataclass
class GraphBreak:
    """One place where Dynamo stopped tracing (deduplicated by place and type)."""

    file: str
    line: int
    function: str
    gb_type: str
    explanation: str
    hints: list[str]
    context: str
    origin: str  # PLUGIN (the plugin's own break) or STOCK_DYNAMO
    effect: str  # what Dynamo did about it
    code: str = ""  # the user's source line
    compile_ids: list[str] = field(default_factory=list)
    # Where Dynamo stopped, when that is inside a library (spmd_types, torch) and the
    # break is placed at the user's line that called into it: "file:line in function".
    inside: str = ""

    @property
    def where(self) -> str:
        return f"{_short(self.file)}:{self.line}"


@dataclass
class Recompile:
    function: str
    file: str
    line: int
    compile_id: str
    previous: str  # compile id of the cached graph whose guard failed
    reason: str  # in user terms where known, else the cleaned guard
    guard: str  # the failed guard as Dynamo printed it (first line)


@dataclass
class CacheOutcome:
    """One compile-cache lookup for a graph (backend inductor only)."""

    cache: str  # "aot_autograd" or "fx_graph"
    stage: str  # "forward" / "backward" for the FX graph cache, "" for AOTAutograd's (both stages)
    state: str  # "hit", "miss" or "bypass"
    reason: str = ""  # in plain words (for hit: the compile time it saved)
    detail: str = ""  # torch's own reason, as it logged it (bypass)
    source: str = ""  # where the graph came from: compiled here, loaded from a rank, a local or remote hit


@dataclass
class SpmdTensor:
    """A graph input or output with its SPMD types, as spmd_types' checker
    left them while the frame was traced."""

    name: str  # an input as the program names it (``x``), an output as the graph does
    role: str  # "input" or "output"
    types: dict[str, str] = field(default_factory=dict)  # mesh axis name -> R, I, V, P or S(d); {}: untyped
    spec: str = ""  # its PartitionSpec, axes by name (the checker's global mode); "" for none


@dataclass
class SpmdCall:
    """One ``spmd.*`` call of the program and the functional collectives it
    became in one stage of a graph."""

    function: str  # "spmd.all_reduce"
    file: str  # the user's line that called it
    line: int
    stage: str  # "dynamo", "forward" or "backward"
    collectives: list[Collective] = field(default_factory=list)
    code: str = ""

    @property
    def where(self) -> str:
        return f"{_short(self.file)}:{self.line}"


@dataclass
class SpmdGraph:
    """spmd_types in one graph: the checker it was traced under, its tensors'
    types, and the ``spmd.*`` calls in it."""

    checker: str  # "local", "global" (``typecheck(local=False)``) or "off"
    inputs: list[SpmdTensor] = field(default_factory=list)
    outputs: list[SpmdTensor] = field(default_factory=list)
    calls: list[SpmdCall] = field(default_factory=list)
    axes: dict[str, str] = field(default_factory=dict)  # group name -> mesh axis name


@dataclass
class CapturedGraph:
    compile_id: str
    function: str
    file: str
    line: int
    inputs: int
    outputs: int
    ops: int
    collectives: list[Collective] = field(default_factory=list)
    stages: list[str] = field(default_factory=list)  # graphs seen: dynamo, forward, backward
    code: str = ""
    note: str = ""  # e.g. why no post-AOT graph was captured
    cache: list[CacheOutcome] = field(default_factory=list)  # inductor only: the compile caches' outcomes
    spmd: SpmdGraph | None = None  # spmd_types in the graph (None: the program uses none)


@dataclass
class FrameOrigin:
    """Where one frame's compiled code came from under torch's precompile
    (``caching_precompile``): traced in this process or loaded from
    Dynamo's cache, and whether what was traced here went into the package
    ``torch.compiler.save_cache_artifacts()`` writes, or why not."""

    function: str  # as the user wrote it; a resume frame: "step after the break at line 12"
    file: str
    line: int
    origin: str  # TRACED, LOADED, LOADED_THEN_TRACED, LOADED_FROM_RANK or LOADED_FROM_RANK_THEN_TRACED
    why: str = ""  # why a frame was traced although precompile was on (no entry, a failed load, its guards)
    compile_ids: list[str] = field(default_factory=list)  # the compiles of it in this process
    package: str = ""  # traced frames: PACKAGED, DECLINED or NOT_SAVED; "" for a frame only loaded
    reason: str = ""  # why it was declined or not saved
    declined_by: str = ""  # DECLINED: PLUGIN (the plugin's guards) or STOCK_DYNAMO


@dataclass
class CompileFailure:
    compile_id: str
    function: str
    file: str
    line: int
    error: str


@dataclass
class ExplainReport:
    mode: str = PLUGIN  # PLUGIN or STOCK
    backend: str = "aot_eager"
    rank: int | None = None
    world_size: int | None = None
    graphs: list[CapturedGraph] = field(default_factory=list)
    breaks: list[GraphBreak] = field(default_factory=list)
    recompiles: list[Recompile] = field(default_factory=list)
    failures: list[CompileFailure] = field(default_factory=list)
    # Per compile id: the guards dynamo_dist installed, in user terms.
    guards: dict[str, list[str]] = field(default_factory=dict)
    error: str | None = None  # the compiled program raised this
    stock: ExplainReport | None = None  # compare_stock: the same run without the plugin
    rank_differences: list[str] = field(default_factory=list)
    cache_dir: str | None = None  # inductor: where the FX graph and AOTAutograd caches live
    compile_once: str = ""  # inductor: "on", or why graphs were not shared across the job's ranks
    # torch's precompile: "" when it was off, else where Dynamo's cache is; and each frame's origin.
    precompile: str = ""
    frames: list[FrameOrigin] = field(default_factory=list)

    @property
    def collectives(self) -> list[Collective]:
        return [c for g in self.graphs for c in g.collectives]

    def counts(self) -> dict[str, int]:
        return {
            "graphs": len(self.graphs),
            "graph breaks": len(self.breaks),
            "recompiles": len(self.recompiles),
            "compile failures": len(self.failures),
            "collectives": len(self.collectives),
        }

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["stock"] = self.stock.to_dict() if self.stock is not None else None
        data["counts"] = self.counts()
        return data

    def __str__(self) -> str:
        return render(self)
