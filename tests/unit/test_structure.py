"""The package's structure keeps its promises:

1. one boundary with torch: only ``dynamo_dist/_compat/`` names torch's
   private modules and attributes, or Dynamo's tracer/codegen/guard internals
   (``_hooks/`` may name the hook points it patches);
3. no import cycles inside ``dynamo_dist``, counting imports inside functions;
4. the member tables drive behaviour: every ``Kind`` has a handler function
   that the dispatch uses, and every row of every table reaches it.

Items 1 and 3 are checked per top-level part of the package, so a failure
says where it is (file:line for each offence, the cycle's modules in order).
"""

from __future__ import annotations

import ast
import pathlib

import pytest

from devtools import module_graph

pytestmark = pytest.mark.release

ROOT = pathlib.Path(__file__).resolve().parents[2] / "dynamo_dist"
PACKAGE = "dynamo_dist"
BOUNDARY = "_compat"

# Private by name, but what users write and what the member tables cover
# (the coverage cases and the fuzzer's programs are user programs).
USER_FACING = {"_StridedShard", "_spec", "_get_backend_name"}

# The hook points _hooks/ patches (private names of Dynamo's classes).
# (_compilation_metrics: explain's recorder widens Dynamo's compile-metrics deque;
# get_guard_manager_from_source: the backported guard source of an AsyncCollectiveTensor input.)
HOOKS_ALLOWED = {"_wrap", "_type_handlers", "_compilation_metrics", "get_guard_manager_from_source"}

# Python's own (not torch's) ways to end a process, in the one module that ends processes.
PROCESS_ALLOWED = {"_exit", "_run_exitfuncs"}

# Dynamo's tracer, codegen and guard internals have public-looking names:
# reading them is reaching into Dynamo as much as ``torch._dynamo`` is.
DYNAMO_INTERNALS = {
    "output", "proxy", "fake_mode", "create_proxy", "import_source",
    "load_import_from", "create_call_function", "create_call_function_kw", "add_push_null",
    "extend_output", "create_load_const", "make_guard", "get_guard_manager", "add_lambda_guard",
    "get_guard_manager_from_source", "guard_tree_values", "create_fn", "originating_source",
    "bypass_package", "user_stack",
}


MODULES = module_graph.modules(ROOT)
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}
_part = module_graph.part
PARTS = sorted({_part(m) for m in MODULES})


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _own_names() -> set[str]:
    """Names dynamo_dist itself defines: module globals, class members and
    ``self.x = ...`` attributes (so ``self._saved`` is ours, not torch's).
    Names defined only inside a function body do not count."""
    names: set[str] = set()

    def collect(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
            elif isinstance(node, ast.ClassDef):
                names.add(node.name)
                collect(node.body)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name):
                            names.add(n.id)
            elif isinstance(node, (ast.If, ast.Try)):
                collect(node.body)
                collect(getattr(node, "orelse", []))
                for handler in getattr(node, "handlers", []):
                    collect(handler.body)

    for tree in TREES.values():
        collect(tree.body)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                    and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                names.add(node.attr)
    return names | {m.rsplit(".", 1)[-1] for m in MODULES}


OWN = _own_names()


def _torch_offences(module: str) -> list[str]:
    path, tree = MODULES[module], TREES[module]
    allowed = HOOKS_ALLOWED if _part(module) == "_hooks" else \
        {f"{PACKAGE}.cli.process": PROCESS_ALLOWED}.get(module, set())
    where = path.relative_to(ROOT.parent)
    found = []
    for node in ast.walk(tree):
        what = None
        if isinstance(node, ast.Import):
            bad = [a.name for a in node.names
                   if a.name.split(".")[0] == "torch" and any(map(_is_private, a.name.split(".")))]
            what = bad and f"import {', '.join(bad)}"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "torch":
            if any(map(_is_private, node.module.split("."))):
                what = f"from {node.module} import ..."
            elif any(_is_private(a.name) and a.name not in USER_FACING for a in node.names):
                what = f"from {node.module} import {', '.join(a.name for a in node.names)}"
        elif isinstance(node, ast.Attribute):
            if _is_private(node.attr) and node.attr not in OWN | allowed | USER_FACING:
                what = f".{node.attr}"
            elif node.attr in DYNAMO_INTERNALS - allowed:
                what = f".{node.attr} (Dynamo internals)"
        if what:
            found.append(f"{where}:{node.lineno}: {what}")
    return found


@pytest.mark.parametrize("part", [p for p in PARTS if p != BOUNDARY])
def test_only_compat_touches_torch_internals(part):
    offences = [o for m in MODULES if _part(m) == part for o in _torch_offences(m)]
    assert not offences, "private torch names outside dynamo_dist/_compat/:\n" + "\n".join(offences)


def test_the_structure_checks_see_offences():
    tree = ast.parse("import torch._dynamo\nfrom torch.distributed import _functional_collectives\n"
                     "x = mesh._dim_group_names\ny = tx.output\n")
    TREES["dynamo_dist._probe"], MODULES["dynamo_dist._probe"] = tree, ROOT / "_probe.py"
    try:
        assert len(_torch_offences("dynamo_dist._probe")) == 4
    finally:
        del TREES["dynamo_dist._probe"], MODULES["dynamo_dist._probe"]


# -- item 3: the import graph -------------------------------------------------

def import_graph() -> dict[str, set[str]]:
    """Module -> the dynamo_dist modules it imports, anywhere in its body."""
    return module_graph.import_graph(MODULES, TREES)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _cycle_text(component: list[str], graph: dict[str, set[str]]) -> str:
    members = set(component)
    edges = [f"  {a} -> {b}" for a in component for b in sorted(graph[a] & members)]
    return "cycle: " + ", ".join(component) + "\n" + "\n".join(edges)


GRAPH = import_graph()
CYCLES = cycles(GRAPH)


def test_no_import_cycle():
    # (A cycle may pass through the package's __init__, which re-exports
    # ``explain``: code inside the package imports the module it needs, e.g.
    # ``from .. import _hooks``, never ``dynamo_dist`` itself.)
    assert not CYCLES, "\n".join(_cycle_text(c, GRAPH) for c in CYCLES)


def test_cycle_finder_finds_cycles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _function_local_imports(part: str) -> list[str]:
    found = []
    for module, tree in TREES.items():
        if _part(module) != part:
            continue
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, (ast.Import, ast.ImportFrom)):
                        found.append(f"{MODULES[module].relative_to(ROOT.parent)}:{node.lineno}")
    return found


# An import inside a function is kept only for an optional or heavy
# dependency, with a comment saying so: these are those, by part. The
# commands (``cli``) import torch inside ``run`` only, so that ``--help`` is
# instant (``tests/tools/test_cli_help.py`` checks it); every other part imports at
# the top of its modules.
LOCAL_IMPORTS_ALLOWED = {
    # _patching and __getattr__ (heavy: torch; `import dynamo_dist` and
    # `python -m dynamo_dist --help` must not import it).
    "__init__": 2,
    # stock_member_kind (optional: older torch lacks opaque objects),
    # runtime_coordinate_op (registers DTensor's ops; only compile_on_one_rank
    # needs it) and inductor_lowering (heavy: all of inductor, only when a
    # graph is lowered with it); spmd._read_facts (optional: spmd_types, read
    # only once the program imported it).
    "_compat": 4,
    # _torch (heavy: torch; install() reads its version before anything else
    # loads, and `import dynamo_dist` must not import it).
    "_supported": 1,
    **{part: 0 for part in PARTS if part not in ("__init__", "_compat", "_supported", "cli")},
}


@pytest.mark.parametrize("part", sorted(LOCAL_IMPORTS_ALLOWED))
def test_core_imports_at_module_level(part):
    found = _function_local_imports(part)
    assert len(found) <= LOCAL_IMPORTS_ALLOWED[part], "\n".join(found)


# -- item 4: the member tables drive behaviour ------------------------------------

def _dispatch_tables():
    """(where, Kind -> handler, the rows it handles) for every dispatch on a Kind."""
    from dynamo_dist.variables import dtensor
    from dynamo_dist.variables.collectives import LiveWorkVariable, WorkVariable
    from dynamo_dist.variables.device_mesh import DeviceMeshVariable
    from dynamo_dist.variables.functions import _FUNCTIONS, DistFunctionVariable
    from dynamo_dist.variables.dtensor import DTENSOR_MEMBERS
    from dynamo_dist.variables.members import Kind
    from dynamo_dist.variables.placement import PlacementVariable
    from dynamo_dist.variables.process_group import ProcessGroupVariable

    for cls in (DeviceMeshVariable, PlacementVariable, ProcessGroupVariable, WorkVariable, LiveWorkVariable):
        yield cls.__name__, cls.KIND_HANDLERS, dict(cls.MEMBERS)
    yield "DistFunctionVariable", DistFunctionVariable.KIND_HANDLERS, dict(_FUNCTIONS)
    from dynamo_dist.variables import modes
    yield "DTensorModeVariable", modes.DTensorModeVariable.KIND_HANDLERS, dict(modes.DTENSOR_MODES)
    from dynamo_dist.variables import spmd

    yield "SpmdFunctionVariable", spmd.SpmdFunctionVariable.KIND_HANDLERS, dict(spmd.SPMD_FUNCTIONS)
    yield "TorchFunctionDispatchVariable", spmd.TorchFunctionDispatchVariable.KIND_HANDLERS, dict(
        spmd.TORCH_FUNCTION_DISPATCH)
    yield "dtensor attributes", dtensor._ATTRIBUTE_HANDLERS, {
        n: m for n, m in DTENSOR_MEMBERS.items() if not m.method}
    # DTensor's operations: methods become one graph call, functions have
    # their own tracing (test_every_dtensor_row_reaches_its_handler).
    yield "dtensor operations", {Kind.DTENSOR_OP: dtensor.call_method}, {
        n: m for n, m in DTENSOR_MEMBERS.items() if m.method}


def test_every_kind_has_a_handler_function():
    """Every Kind is used by some table, and the tracker reading that table
    maps it to a function (not a method name)."""
    from dynamo_dist.variables.members import Kind

    used = set()
    for where, handlers, rows in _dispatch_tables():
        for kind, handler in handlers.items():
            assert isinstance(kind, Kind) and callable(handler) and not isinstance(handler, str), (where, kind)
        kinds = {m.kind for m in rows.values()}
        assert kinds <= set(handlers), (where, kinds - set(handlers))
        used |= kinds
    assert used == set(Kind), set(Kind) - used


def test_no_tracker_branches_on_a_member_name():
    """Where a row has a Kind, its Kind decides: no ``name == "get_group"``."""
    from dynamo_dist import tracked_types, variables  # noqa: F401  (variables: declares the types)

    rows = {n for record in tracked_types.records() if record.members is not None for n in record.members}
    found = []
    for module, tree in TREES.items():
        if not module.startswith(f"{PACKAGE}.variables.") or module.endswith(".members"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.Eq, ast.NotEq, ast.In, ast.NotIn)):
                sides = [node.left, *node.comparators]
                on_name = any(isinstance(n, ast.Name) and n.id == "name"
                              or isinstance(n, ast.Attribute) and n.attr == "name" for n in sides)
                named = on_name and [n for n in ast.walk(node) if isinstance(n, ast.Constant) and n.value in rows]
                if named:
                    found.append(f"{MODULES[module].relative_to(ROOT.parent)}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "\n".join(found)


class _Spy:
    def __init__(self):
        self.calls = []

    def handler(self, label):
        def record(*args, **kwargs):
            self.calls.append(label)
            return "handled"

        return record


@pytest.mark.parametrize("type_name", ["DeviceMesh", "Placement", "ProcessGroup"])
def test_every_object_row_reaches_the_handler_of_its_kind(world8, monkeypatch, type_name):
    """Through the real entry points (attribute read, method call), each row
    is dispatched to the handler its Kind selects."""
    from torch.distributed.tensor.placement_types import _StridedShard

    from dynamo_dist.testing import make_mesh
    from dynamo_dist.variables.base import DistObjectVariable
    from dynamo_dist.variables.device_mesh import DeviceMeshVariable
    from dynamo_dist.variables import ALL_TABLES
    from dynamo_dist.variables.placement import PlacementVariable
    from dynamo_dist.variables.process_group import ProcessGroupVariable

    mesh = make_mesh((2, 4), ("dp", "tp"))
    vt = {"DeviceMesh": lambda: DeviceMeshVariable(mesh),
          "Placement": lambda: PlacementVariable(_StridedShard(0, split_factor=2)),
          "ProcessGroup": lambda: ProcessGroupVariable(mesh.get_group("tp"))}[type_name]()
    spy = _Spy()
    assert type(vt).MEMBERS is ALL_TABLES[type_name]
    handlers = type(vt).KIND_HANDLERS
    assert set(DistObjectVariable.KIND_HANDLERS) <= set(handlers)
    monkeypatch.setattr(type(vt), "KIND_HANDLERS", {kind: spy.handler(kind) for kind in handlers})
    for name, member in ALL_TABLES[type_name].items():
        spy.calls.clear()
        if member.method:
            result = vt.call_method(None, name, [], {})
        else:
            result = C_slot(vt, "vt_getattr")(None, name)
        assert result == "handled" and spy.calls == [member.kind], name


def C_slot(vt, ours):
    from dynamo_dist import _compat as C

    return C.slots.slot_method(vt, ours)


def test_every_function_row_reaches_the_handler_of_its_kind(world8, monkeypatch):
    import torch.distributed as dist

    from dynamo_dist.variables.functions import _FUNCTIONS, DistFunctionVariable, dist_functions

    spy = _Spy()
    handlers = DistFunctionVariable.KIND_HANDLERS
    monkeypatch.setattr(DistFunctionVariable, "KIND_HANDLERS", {kind: spy.handler(kind) for kind in handlers})
    by_name = {name: fn for fn, name in dist_functions().items()}
    # A row for a call newer releases have is absent from older ones.
    missing = set(_FUNCTIONS) - set(by_name)
    assert all(not hasattr(dist, name) for name in missing), missing
    for name, member in _FUNCTIONS.items():
        if name in missing:
            continue
        spy.calls.clear()
        assert DistFunctionVariable(by_name[name], name).call_function(None, [], {}) == "handled"
        assert spy.calls == [member.kind], name


def test_every_dtensor_row_reaches_its_handler(world8, monkeypatch):
    """The DTensor tracker reads DTENSOR_MEMBERS: attributes by Kind, methods
    become one graph call, functions have their own tracing."""
    import torch
    from torch.distributed.tensor import DTensor

    from dynamo_dist import _compat as C
    from dynamo_dist.variables import dtensor
    from dynamo_dist.variables.dtensor import DTENSOR_MEMBERS
    from dynamo_dist.variables.members import Kind

    class FakeDTensorVar:
        source = None

        def python_type(self):
            return DTensor

    spy = _Spy()
    fake = FakeDTensorVar()
    monkeypatch.setattr(C.dynamo, "example_value", lambda vt: torch.ones(1))
    monkeypatch.setattr(C.dynamo, "graph_call", lambda tx, op, tensors, constants=(): spy.handler("graph_call")())
    for kind in list(dtensor._ATTRIBUTE_HANDLERS):
        monkeypatch.setitem(dtensor._ATTRIBUTE_HANDLERS, kind, spy.handler(kind))
    for name in list(dtensor._FUNCTION_HANDLERS):
        monkeypatch.setitem(dtensor._FUNCTION_HANDLERS, name, spy.handler(name))
    functions = {name: fn for fn, name in dtensor.dtensor_functions().items()}
    for name, member in DTENSOR_MEMBERS.items():
        spy.calls.clear()
        if not member.method:
            monkeypatch.setattr(torch.Tensor, name, "value", raising=False)
            assert dtensor.var_getattr(None, fake, name) == "handled", name
            assert spy.calls == [member.kind], name
        elif name in functions:
            assert member.kind is Kind.DTENSOR_OP
            assert dtensor.DTensorFunctionVariable(functions[name], name).call_function(None, [], {}) == "handled"
            assert spy.calls == [name]
        else:
            assert member.kind is Kind.DTENSOR_OP
            assert dtensor.call_method(None, fake, name, [C.dynamo.constant("x")], {}) == "handled", name
            assert spy.calls == ["graph_call"], name


# -- docs/design.md's layout names every module ------------------------------------

def _layout_names() -> set[str]:
    """The modules docs/design.md's layout block names: ``dynamo_dist/x.py``
    lines, and under a ``dynamo_dist/pkg/`` line its indented ``y.py`` lines."""
    design = (ROOT.parent / "docs" / "design.md").read_text()
    block = design.split("## Layout", 1)[1].split("```", 2)[1]
    named, package = set(), None
    for line in block.splitlines():
        word = line.split()[0] if line.strip() else ""
        if word.startswith(f"{PACKAGE}/"):
            path = word.removeprefix(f"{PACKAGE}/")
            package = path if path.endswith("/") else None
            named.add(path if path.endswith(".py") else f"{path}__init__.py")
        elif package is not None and line.startswith(" ") and word.endswith(".py"):
            named.add(package + word)
        elif not line.startswith(" "):
            package = None
    return named


def test_the_design_layout_names_every_module():
    """Every module of the package has its line in docs/design.md's layout
    (a package its ``dynamo_dist/pkg/`` line), and every line names a module."""
    modules = {str(path.relative_to(ROOT)) for path in MODULES.values()}
    named = _layout_names()
    assert not sorted(modules - named), f"modules the layout does not name: {sorted(modules - named)}"
    assert not sorted(named - modules), f"the layout names what is not there: {sorted(named - modules)}"


# -- _compat is namespaced: a call site names the job ------------------------------

def test_compat_re_exports_no_name():
    """``_compat/__init__.py`` binds its submodules and nothing else, so a
    call site names the job (``C.dynamo.install_guard``) and a reader (or a
    tool following calls) finds the definition where the name says."""
    tree = TREES[f"{PACKAGE}.{BOUNDARY}"]
    submodules = {m.rsplit(".", 1)[1] for m in MODULES if m.startswith(f"{PACKAGE}.{BOUNDARY}.")}
    bound = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module is None:
            bound += [a.asname or a.name for a in node.names if a.name not in submodules]
        elif isinstance(node, (ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign, ast.FunctionDef, ast.ClassDef)):
            bound.append(ast.unparse(node).splitlines()[0])
    assert not bound, f"_compat/__init__.py binds more than its submodules: {bound}"


def test_devtools_reads_torch_only_through_observe():
    """The tools (``devtools/``) reach torch's internals only through
    ``_compat.observe``, what they read of torch named in one module (the
    design's rule for the tools): no other ``_compat`` module is imported."""
    offences = []
    for path in sorted((ROOT.parent / "devtools").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if f"{PACKAGE}.{BOUNDARY}" in name and not name.startswith(f"{PACKAGE}.{BOUNDARY}.observe"):
                    offences.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} imports {name}")
    assert not offences, "\n".join(offences)


def test_no_compat_function_wraps_an_original():
    """A fix of torch (a function that takes torch's ``original`` and returns
    its replacement, as ``_hooks`` installs it) lives in its concern's
    package (``aot/``, ``precompile/``, ``guards/``...); ``_compat`` holds
    the facts and accessors those fixes use, never a wrapper."""
    offences = []
    for name, tree in TREES.items():
        if not name.startswith(f"{PACKAGE}.{BOUNDARY}"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                params = [a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)]
                if "original" in params:
                    offences.append(f"{name}:{node.lineno} {node.name}(original, ...)")
    assert not offences, "wrappers of torch's functions inside _compat:\n" + "\n".join(offences)
