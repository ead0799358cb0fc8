"""Generated programs: small straight-line functions, as source code.

A program is the text of one function built from a grammar of statements
(queries of meshes, placements and process groups; placement construction;
branches on the answers; handled errors; escaping objects; for DTensor,
ops and redistributes). Being text, a failing program is written verbatim
into a reproducer script.

Query programs have the signature ``f(x, mesh, ps, pg)`` and return
``(x, (v0, v1, ...))``: the tensor and every answer the program computed, so
the oracle compares all of them (and every escaping object) with eager.
Every statement is one source line (or one ``if``/``try`` header), and the
program records which inputs each line reads (``line_touches``), so the guard
property knows what a trace depended on.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Iterable

from hypothesis import strategies as st
from torch.distributed.tensor.placement_types import Partial, Replicate, Shard, _StridedShard

from .. import _compat as C
from .specs import DTENSOR_OPS, REDUCE_OPS, DTensorSpec, Program, QueryInputs, World, placement_code
from .values import placements as placements_st

# ---------------------------------------------------------------------------
# The query grammar.


@dataclass
class _Expr:
    code: str
    type: str  # int | bool | str | seq | placement | placements | mesh | group | tensor | any
    touches: frozenset[str] = frozenset()


@dataclass
class _Mesh:
    code: str
    shape: tuple[int, ...]
    names: tuple[str, ...] | None
    touches: frozenset[str] = frozenset({"mesh"})


@dataclass
class _Group:
    code: str
    size: int
    touches: frozenset[str]


@dataclass
class _Line:
    indent: int
    text: str
    touches: frozenset[str] = frozenset()


@dataclass
class _Builder:
    draw: Any
    world: World
    inputs: QueryInputs
    tensor_ndim: int
    wild: bool = False
    escapes: bool = False
    lines: list[_Line] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    ints: list[str] = field(default_factory=list)
    bools: list[str] = field(default_factory=list)
    counter: int = 0

    # -- helpers ---------------------------------------------------------------
    def pick(self, options: Iterable[Any]) -> Any:
        return self.draw(st.sampled_from(list(options)))

    def new_var(self) -> str:
        name = f"v{self.counter}"
        self.counter += 1
        return name

    def emit(self, indent: int, text: str, touches: Iterable[str] = ()) -> None:
        self.lines.append(_Line(indent, text, frozenset(touches)))

    # -- meshes, groups, placements ------------------------------------------
    def mesh(self) -> _Mesh:
        shape, names = self.inputs.mesh.shape_and_names()
        options = [_Mesh("mesh", shape, names)]
        if names:
            ndim = len(names)
            for r in range(1, ndim + 1):
                for combo in itertools.combinations(range(ndim), r):
                    sub_names = tuple(names[i] for i in combo)
                    sub_shape = tuple(shape[i] for i in combo)
                    key = repr(sub_names[0]) if r == 1 else repr(sub_names)
                    sub = f"mesh[{key}]" if r < ndim else "mesh"
                    if r < ndim:
                        options.append(_Mesh(sub, sub_shape, sub_names))
                    flat = "f_" + "_".join(sub_names)
                    size = 1
                    for s in sub_shape:
                        size *= s
                    options.append(_Mesh(f"{sub}._flatten({flat!r})", (size,), (flat,)))
        return self.pick(options)

    def group(self) -> _Group:
        options = [
            _Group("pg", self.inputs.group.size(self.world), frozenset({"pg"})),
            _Group("dist.group.WORLD", self.world.size, frozenset({"world"})),
        ]
        m = self.mesh()
        for i, size in enumerate(m.shape):
            options.append(_Group(f"{m.code}.get_group({i})", size, m.touches))
            if m.names:
                options.append(_Group(f"{m.code}.get_group({m.names[i]!r})", size, m.touches))
        if len(m.shape) == 1:
            options.append(_Group(f"{m.code}.get_group()", m.shape[0], m.touches))
        return self.pick(options)

    def placement_literal(self) -> tuple[str, Any]:

        dim = self.draw(st.integers(0, self.tensor_ndim - 1))
        placement = self.pick(["shard", "shard_kw", "replicate", "partial", "partial_default", "strided"])
        if placement == "shard":
            return f"Shard({dim})", Shard(dim)
        if placement == "shard_kw":
            return f"Shard(dim={dim})", Shard(dim)
        if placement == "replicate":
            return "Replicate()", Replicate()
        if placement == "partial_default":
            return "Partial()", Partial()
        if placement == "partial":
            op = self.pick(REDUCE_OPS)
            return f"Partial({op!r})", Partial(op)
        sf = self.draw(st.integers(1, 4))
        return f"_StridedShard({dim}, split_factor={sf})", _StridedShard(dim, split_factor=sf)

    def placement(self) -> tuple[str, Any, frozenset[str]]:
        ps = self.inputs.placements
        if ps and self.draw(st.booleans()):
            i = self.draw(st.integers(0, len(ps) - 1))
            return f"ps[{i}]", ps[i], frozenset({"ps", f"ps[{i}]"})
        code, value = self.placement_literal()
        return code, value, frozenset()

    # -- value queries -----------------------------------------------------------
    def mesh_query(self) -> _Expr:
        m = self.mesh()
        t = m.touches
        ndim = len(m.shape)
        i = self.draw(st.integers(0, ndim - 1))
        opts = [
            _Expr(f"{m.code}.ndim", "int", t),
            _Expr(f"{m.code}.shape", "seq", t),
            _Expr(f"{m.code}.size()", "int", t),
            _Expr(f"{m.code}.size({i})", "int", t),
            _Expr(f"{m.code}.size(mesh_dim={i})", "int", t),
            _Expr(f"{m.code}.shape[{i}]", "int", t),
            _Expr(f"len({m.code}.shape)", "int", t),
            _Expr(f"{m.code}.mesh_dim_names", "seq", t),
            _Expr(f"{m.code}.device_type", "str", t),
            _Expr(f"{m.code}.get_rank()", "int", t),
            _Expr(f"{m.code}.get_local_rank({i})", "int", t),
            _Expr(f"{m.code}.get_local_rank(mesh_dim={i})", "int", t),
            _Expr(f"{m.code}.get_coordinate()", "seq", t),
            _Expr(f"{m.code}.get_coordinate()[{i}]", "int", t),
            _Expr(f"len({m.code}.get_all_groups())", "int", t),
            _Expr(f"tuple(g.size() for g in {m.code}.get_all_groups())", "seq", t),
            _Expr(f"{m.code}.mesh", "tensor", t),
            _Expr(f"{m.code} == mesh", "bool", t),
            _Expr(f"{m.code} != mesh", "bool", t),
            _Expr(f"hash({m.code}) == hash(mesh)", "bool", t),
            _Expr(f"{m.code}.mesh_dim_names is None", "bool", t),
            _Expr(f"{m.code}.size({i - ndim})", "int", t),
            _Expr(f"{m.code}.get_local_rank({i - ndim})", "int", t),
            _Expr(f"{m.code}.get_group({i - ndim}).size()", "int", t),
            _Expr(f"sum({m.code}.shape)", "int", t),
            _Expr(f"max({m.code}.shape)", "int", t),
            _Expr(f"{m.code}.shape == {m.shape!r}", "bool", t),
            _Expr(f"str({m.code})", "str", t),
            _Expr(f"repr({m.code})", "str", t),
            _Expr(f'f"{{{m.code}.shape}}/{{{m.code}.get_coordinate()}}"', "str", t),
            _Expr(f"{{{m.code}: 1}}.get(mesh, 0)", "int", t),
            _Expr(f"isinstance({m.code}, DeviceMesh)", "bool", t),
            _Expr(f"{m.code}.mesh.flatten()[{m.code}.get_rank() % {m.code}.size()]", "tensor", t),
            _Expr(f"torch.full(({m.code}.ndim,), {m.code}.size({i}))", "tensor", t),
            _Expr(f"dist.get_process_group_ranks({m.code}.get_group({i}))[{m.code}.get_local_rank({i})]", "int", t),
            _Expr(f"{m.code}.get_group({i}) in {m.code}.get_all_groups()", "bool", t),
            _Expr(f"{m.code}.get_group({i}) is {m.code}.get_group({i})", "bool", t),
            _Expr(f"{m.code}.get_group({i}) is pg", "bool", t | {"pg"}),
            _Expr(f"{m.code} is mesh", "bool", t),
            _Expr(f"{m.code} is {self.mesh().code}", "bool", t),
            _Expr(f"type({m.code}) is DeviceMesh", "bool", t),
            _Expr(f"{m.code}.__class__ == DeviceMesh", "bool", t),
            _Expr(f"type({m.code}.get_group({i})) is dist.ProcessGroup", "bool", t),
            _Expr(f"x + funcol.all_reduce(x, 'sum', ({m.code}, {i}))", "tensor", t),
        ]
        if m.names:
            opts.append(_Expr(f"{m.code}.get_local_rank({m.names[i]!r})", "int", t))
            opts.append(_Expr(f"{m.names[i]!r} in {m.code}.mesh_dim_names", "bool", t))
            opts.append(_Expr(f"{m.code}.mesh_dim_names[{i}]", "str", t))
        if ndim == 1:
            opts.append(_Expr(f"{m.code}.get_local_rank()", "int", t))
        return self.pick(opts)

    def group_query(self) -> _Expr:
        g = self.group()
        t = g.touches
        j = self.draw(st.integers(0, g.size - 1))
        other = self.group()
        return self.pick([
            _Expr(f"{g.code}.size()", "int", t),
            _Expr(f"{g.code}.rank()", "int", t),
            _Expr(f"{g.code}.group_name", "str", t),
            _Expr(f"{g.code}.group_desc", "str", t),
            _Expr(f"{g.code}.name()", "str", t),
            _Expr(f"{g.code}._get_backend_name()", "str", t),
            _Expr(f"dist.get_rank({g.code})", "int", t),
            _Expr(f"dist.get_world_size({g.code})", "int", t),
            _Expr(f"dist.get_process_group_ranks({g.code})", "seq", t),
            _Expr(f"len(dist.get_process_group_ranks({g.code}))", "int", t),
            _Expr(f"dist.get_backend({g.code})", "str", t),
            _Expr(f"dist.get_global_rank({g.code}, {j})", "int", t),
            _Expr(f"dist.get_group_rank({g.code}, dist.get_global_rank({g.code}, {j}))", "int", t),
            _Expr(f"{g.code} == {other.code}", "bool", t | other.touches),
            _Expr(f"{g.code} != {other.code}", "bool", t | other.touches),
            _Expr(f"{g.code} is {other.code}", "bool", t | other.touches),
            _Expr(f"{g.code}.__class__ is type({other.code})", "bool", t | other.touches),
            _Expr(f"{{{g.code}: 1}}.get({other.code}, 0)", "int", t | other.touches),
            _Expr(f"x + funcol.all_reduce(x, 'sum', {g.code})", "tensor", t),
            _Expr(f"funcol.{C.distributed.ALL_GATHER_SINGLE}(x, 0, {g.code})", "tensor", t),
            _Expr("dist.get_rank()", "int", frozenset({"world"})),
            _Expr("dist.get_world_size()", "int", frozenset({"world"})),
            _Expr("dist.is_initialized()", "bool", frozenset({"world"})),
        ])

    def placement_query(self) -> _Expr:

        code, value, t = self.placement()
        code2, _, t2 = self.placement()
        d = self.draw(st.integers(0, self.tensor_ndim - 1))
        cls = self.pick(["Shard", "Replicate", "Partial", "_StridedShard", "Placement"])
        ps_all = frozenset({"ps", "ps[*]"})
        opts = [
            _Expr(f"{code}.is_shard()", "bool", t),
            _Expr(f"{code}.is_shard({d})", "bool", t),
            _Expr(f"{code}.is_replicate()", "bool", t),
            _Expr(f"{code}.is_partial()", "bool", t),
            _Expr(f"{code}.is_partial({self.pick(REDUCE_OPS)!r})", "bool", t),
            _Expr(f"isinstance({code}, {self.pick(['Shard', 'Replicate', 'Partial', '_StridedShard'])})", "bool", t),
            _Expr(f"isinstance({code}, (Shard, _StridedShard))", "bool", t),
            _Expr(f"{code} == {code2}", "bool", t | t2),
            _Expr(f"{code} != {code2}", "bool", t | t2),
            _Expr(f"hash({code}) == hash({code2})", "bool", t | t2),
            _Expr(f"{code} in ps", "bool", t | ps_all),
            _Expr(f"str({code})", "str", t),
            _Expr(f"repr({code})", "str", t),
            _Expr(f"{{Shard(0): 1, Replicate(): 2, Partial(): 3}}.get({code}, 0)", "int", t),
            _Expr(f"{code}.dim if {code}.is_shard() else -1", "int", t),
            _Expr(f"{code}.reduce_op if {code}.is_partial() else 'none'", "str", t),
            _Expr(f"{code}.split_factor if isinstance({code}, _StridedShard) else 0", "int", t),
            _Expr("len(ps)", "int", frozenset({"ps"})),
            _Expr(f"ps.count({code})", "int", t | ps_all),
            _Expr("sum(1 for p in ps if p.is_shard())", "int", ps_all),
            _Expr("any(p.is_partial() for p in ps)", "bool", ps_all),
            _Expr("tuple(p.dim for p in ps if p.is_shard())", "seq", ps_all),
            _Expr(f"{code} in (Shard(0), Replicate(), Partial())", "bool", t),
            _Expr(f"len({{{code}, {code2}}})", "int", t | t2),
            _Expr(f"type({code}) is Shard", "bool", t),
            # The class of a placement, asked every way (2.11 / 2.12 answered
            # ``type(Shard(0)) is Shard`` False).
            _Expr(f"type({code}) is {cls}", "bool", t),
            _Expr(f"{code}.__class__ is {cls}", "bool", t),
            _Expr(f"type({code}) == {cls}", "bool", t),
            _Expr(f"type({code}) != {cls}", "bool", t),
            _Expr(f"issubclass(type({code}), {cls})", "bool", t),
            _Expr(f"type({code}) in ({cls}, Replicate)", "bool", t),
            _Expr(f"type({code}) is type({code2})", "bool", t | t2),
            _Expr(f"{code} is {code2}", "bool", t | t2 | ({"ps[is]"} if t and t2 else set())),
            _Expr(f"type({code}).__name__", "str", t),
            _Expr(f"{code}.is_shard({d - self.tensor_ndim})", "bool", t),
            _Expr(f'f"{{{code}}}-{{{code2}!r}}"', "str", t | t2),
            _Expr(f"bool({code})", "bool", t),
            _Expr(f"getattr({code}, 'dim', None)", "any", t),
            _Expr(f"{code} == 1", "bool", t),
            _Expr(f"{code} == None", "bool", t),
            _Expr("hash(ps) == hash(tuple(ps))", "bool", ps_all),
            _Expr("[i for i, p in enumerate(ps) if p.is_shard()]", "seq", ps_all),
            _Expr("ps[-1].is_replicate()", "bool", frozenset({"ps", f"ps[{len(self.inputs.placements) - 1}]"})),
            _Expr("max([p.dim for p in ps if p.is_shard()] or [-1])", "int", ps_all),
            _Expr("sorted(str(p) for p in ps)", "seq", ps_all),
        ]
        # Members only some placements have: drawn half of the time when present.
        specific = []
        if isinstance(value, Shard) or type(value).__name__ == "_StridedShard":
            specific.append(_Expr(f"{code}.dim", "int", t))
        if isinstance(value, Partial):
            specific.append(_Expr(f"{code}.reduce_op", "str", t))
        if type(value).__name__ == "_StridedShard":
            specific.append(_Expr(f"{code}.split_factor", "int", t))
        if hasattr(value, "tag"):  # specs.TaggedShard, a user-defined placement
            specific += [_Expr(f"{code}.tag", "int", t), _Expr(f"{code}.weight()", "int", t)]
        if specific and self.draw(st.booleans()):
            return self.pick(specific)
        return self.pick(opts)

    def escape(self) -> _Expr:
        """An object the program returns: rebuilt (or reloaded) after the graph."""
        m = self.mesh()
        code, _, pt = self.placement()
        literal, _ = self.placement_literal()
        g = self.group()
        ps_all = frozenset({"ps", "ps[*]"})
        opts = [
            _Expr(literal, "placement"),
            # Returning an input object as it came in counts as reading it:
            # Dynamo wraps (and the plugin guards) every value it handles.
            _Expr(code, "placement", pt),
            _Expr("[p for p in ps if not p.is_replicate()]", "placements", ps_all),
            _Expr(f"({literal}, Replicate())", "placements"),
            _Expr(f"[{literal}] * {len(self.inputs.placements)}", "placements"),
            _Expr(m.code, "mesh", m.touches),
            _Expr(g.code, "group", g.touches),
            _Expr(f"({literal}, [{m.code}])", "any", m.touches),
            _Expr(f"{{'p': {literal}, 'g': {g.code}}}", "any", g.touches),
            # Returned as they came in: read all the same (see above).
            _Expr("ps[1:]", "placements",
                  frozenset({"ps"} | {f"ps[{i}]" for i in range(1, len(self.inputs.placements))})),
            _Expr("list(ps)", "placements", ps_all),
            _Expr("ps[::-1]", "placements", ps_all),
        ]
        if self.ints:
            v = self.pick(self.ints)
            opts.append(_Expr(f"Shard({v})", "placement"))
            opts.append(_Expr(f"_StridedShard({v}, split_factor=abs({v}) + 1)", "placement"))
        if len(m.shape) > 0:
            opts.append(_Expr(f"{m.code}.get_all_groups()", "groups", m.touches))
        return self.pick(opts)

    def handled_error(self) -> tuple[str, str, frozenset[str]]:
        """A query that raises in eager, inside try/except: (expr, exception, touches)."""
        shape, _ = self.inputs.mesh.shape_and_names()
        n = len(self.inputs.placements)
        return self.pick([
            (f"mesh.size({len(shape) + 2})", "IndexError", frozenset({"mesh"})),
            ("ps[{}]".format(n + 1), "IndexError", frozenset({"ps"})),
            ("Replicate().dim", "AttributeError", frozenset()),
            ("Shard('x')", "TypeError", frozenset()),
            ("mesh.no_such_member", "AttributeError", frozenset({"mesh"})),
            ("pg.no_such_member", "AttributeError", frozenset({"pg"})),
        ])

    def query(self) -> _Expr:
        which = self.pick(["mesh", "mesh", "group", "placement", "placement"])
        if which == "mesh":
            return self.mesh_query()
        if which == "group":
            return self.group_query()
        return self.placement_query()

    def condition(self) -> _Expr:
        options = ["query", "query"]
        if self.ints:
            options.append("int")
        if self.bools:
            options.append("bool")
        which = self.pick(options)
        if which == "int":
            v = self.pick(self.ints)
            return _Expr(f"{v} > {self.draw(st.integers(0, 3))}", "bool")
        if which == "bool":
            return _Expr(f"not {self.pick(self.bools)}", "bool")
        while True:
            e = self.query()
            if e.type == "bool":
                return e
            if e.type == "int":
                return _Expr(f"{e.code} > {self.draw(st.integers(0, 3))}", "bool", e.touches)

    # -- statements --------------------------------------------------------------
    def assign(self, indent: int, var: str, expr: _Expr) -> None:
        self.emit(indent, f"{var} = {expr.code}", expr.touches)
        if expr.type in ("int", "bool"):
            if self.draw(st.booleans()):
                self.emit(indent, f"x = x + {var}")
        elif expr.type == "tensor":
            self.emit(indent, f"x = x + {var}.sum()")

    def value(self) -> _Expr:
        if self.escapes and self.draw(st.integers(0, 2)) > 0:
            return self.escape()
        if self.draw(st.integers(0, 5)) == 0:
            return self.escape()
        return self.query()

    def statement(self) -> None:
        statement = self.pick(["assign"] * 5 + ["branch"] * 2 + ["try", "loop"] + (["wild"] * 3 if self.wild else []))
        var = self.new_var()
        if statement == "assign":
            expr = self.value()
            self.assign(1, var, expr)
            self._record(var, expr)
        elif statement == "branch":
            cond = self.condition()
            self.emit(1, f"if {cond.code}:", cond.touches)
            a = self.value()
            self.assign(2, var, a)
            self.emit(1, "else:")
            b = self.value()
            self.assign(2, var, b)
            self.emit(2, f"x = x * {self.draw(st.integers(1, 3))}")
            if a.type == b.type:
                self._record(var, a)
            else:
                self.answers.append(var)
        elif statement == "loop":
            ps_all = frozenset({"ps", "ps[*]"})
            self.emit(1, f"{var} = []")
            self.emit(1, "for p in ps:", ps_all)
            self.emit(2, "if p.is_shard():", ps_all)
            self.emit(3, f"{var}.append(p.dim)", ps_all)
            self.emit(2, "elif p.is_partial():", ps_all)
            self.emit(3, f"{var}.append(p.reduce_op)", ps_all)
            self.emit(2, "else:")
            self.emit(3, f"{var}.append(p)")
            self.answers.append(var)
        elif statement == "try":
            expr, exc, touches = self.handled_error()
            self.emit(1, "try:")
            self.emit(2, f"{var} = {expr}", touches)
            self.emit(1, f"except {exc}:")
            self.emit(2, f"{var} = -1")
            self.answers.append(var)
        else:
            self.wild_statement(var)

    def _record(self, var: str, expr: _Expr) -> None:
        self.answers.append(var)
        if expr.type == "int":
            self.ints.append(var)
        elif expr.type == "bool":
            self.bools.append(var)

    def wild_statement(self, var: str) -> None:
        """Anything: bad input, unsupported members, tensor-dependent
        arguments, distributed state created inside the region."""
        shape, names = self.inputs.mesh.shape_and_names()
        w = self.world.size
        n = len(self.inputs.placements)
        choice = self.pick([
            f"mesh.size({len(shape) + 1})",
            "mesh.get_local_rank()",
            "mesh['nope']",
            "mesh['nope', 'nada']",
            "Shard('x')",
            "Shard(1.5)",
            "_StridedShard(0)",
            "Partial(3)",
            f"ps[{n + 1}]",
            "ps[0].dim",
            "ps[0].reduce_op",
            "ps[0].split_factor",
            f"mesh.get_group({len(shape) + 1})",
            "mesh.get_group('nope')",
            f"dist.get_global_rank(pg, {w + 3})",
            "mesh.no_such_member",
            "pg.no_such_member()",
            "stmt: pg.barrier()",
            f"init_device_mesh('cpu', ({w},)).ndim",
            f"dist.new_group(list(range({w}))).size()",
            "stmt: dist.all_reduce(x)",
            "mesh.size(int(x.sum()) % mesh.ndim)",
            "mesh.size(len(x) % mesh.ndim)",
            "mesh.mesh.tolist()",
            "str(mesh)",
            "repr(pg) == repr(pg)",
            "getattr(ps[0], 'dim', -1)",
            "hasattr(mesh, 'nope')",
            "{pg: 1}[pg]",
            "type(ps[0]).__name__",
            "ps[0] < ps[0]",
            "mesh[('nope',)]" if not names else f"mesh[{names[::-1]!r}]",
            "Partial('nope').reduce_op",
            f"mesh.get_local_rank({len(shape) + 1})",
            "dist.get_process_group_ranks(None)",
            "len(pg)",
        ])
        touches = frozenset({"mesh", "pg", "world", "ps", "ps[*]"})
        if choice.startswith("stmt: "):  # called for its effect; its value (a Work) is not compared
            self.emit(1, choice[len("stmt: "):], touches)
            return
        self.emit(1, f"{var} = {choice}", touches)
        self.answers.append(var)

    def render(self) -> Program:
        header = "def f(x, mesh, ps, pg):"
        text = [header, "    x = x + 1"]
        touches: list[tuple[int, frozenset[str]]] = []
        for line in self.lines:
            text.append("    " * line.indent + line.text)
            if line.touches:
                touches.append((len(text), line.touches))
        answers = ", ".join(self.answers) + ("," if len(self.answers) == 1 else "")
        text.append(f"    return x, ({answers})")
        return Program("\n".join(text) + "\n", tuple(touches))


@st.composite
def query_programs(
    draw: Any,
    world: World,
    inputs: QueryInputs,
    tensor_ndim: int = 2,
    *,
    max_statements: int = 6,
    wild: bool = False,
    escapes: bool = False,
) -> Program:
    """A query program for ``f(x, mesh, ps, pg)`` that is valid for ``inputs``
    in ``world`` (``wild=True``: anything, including bad input and members
    that cannot compile; ``escapes=True``: mostly objects returned)."""
    b = _Builder(draw, world, inputs, tensor_ndim, wild=wild, escapes=escapes)
    # Statements are list elements, so the shrinker can delete any of them.
    draw(st.lists(_statement(b), min_size=1, max_size=max_statements))
    b.draw = draw
    return b.render()


@st.composite
def _statement(draw: Any, builder: _Builder) -> None:
    builder.draw = draw
    builder.statement()


# ---------------------------------------------------------------------------
# DTensor programs: f(d, w) with d a DTensor (and w a replicated 2-D DTensor
# for matmul), a few ops and redistributes, returning full tensors and the
# local shards.


# What a generated DTensor program returns, unless told otherwise.
DTENSOR_RETURNS = ("d.full_tensor(), d.to_local(), d.placements",)


def _size(shape: Any) -> int:
    n = 1
    for k in shape:
        n *= k
    return n


def _reshapes(shape: tuple[int, ...]) -> list[tuple[str, tuple[int, ...]]]:
    """The view-family statements for a ``shape`` DTensor, each with the shape it
    makes: what users write to flatten tokens, split heads and move dims
    (sizes spelled out, so a zero-size dim never makes ``-1`` ambiguous).
    A tensor with no elements is only transposed, permuted and unsqueezed:
    eager DTensor's sharding rule for a reshape (``view_groups`` in
    ``torch/distributed/tensor/_ops/_view_ops.py``) loops forever on one
    (``reshape(0)`` of a ``(0, 2)`` DTensor, torch 2.15.0)."""
    n = len(shape)
    out: list[tuple[str, tuple[int, ...]]] = []
    regroups = _size(shape) > 0
    if n >= 1:
        out.append(("d.unsqueeze(0)", (1, *shape)))
    if n >= 1 and regroups:
        out.append((f"d.reshape({_size(shape)})", (_size(shape),)))
    if n >= 2:
        out.append(("d.t()" if n == 2 else "d.transpose(0, 1)", (shape[1], shape[0], *shape[2:])))
        perm = tuple(reversed(range(n)))
        out.append((f"d.permute{perm}", tuple(shape[i] for i in perm)))
    if n >= 2 and regroups:
        rows = _size(shape[:-1])
        out.append((f"d.view({rows}, {shape[-1]})", (rows, shape[-1])))
        out.append(("d.flatten(0, 1)", (shape[0] * shape[1], *shape[2:])))
    if n >= 3:
        out.append((f"d.transpose({n - 2}, {n - 1})", (*shape[:-2], shape[-1], shape[-2])))
    if n >= 3 and regroups:
        out.append((f"d.flatten({n - 2}, {n - 1})", (*shape[:-2], shape[-2] * shape[-1])))
    for i, k in enumerate(shape if regroups else ()):
        f = next((f for f in range(2, k) if k % f == 0), None)
        if f is not None:
            out.append((f"d.unflatten({i}, ({f}, {k // f}))", (*shape[:i], f, k // f, *shape[i + 1:])))
    return out


@dataclass
class _DTensorBuilder:
    spec: DTensorSpec
    ops: tuple[str, ...]
    lines: list[str] = field(default_factory=list)
    shape: tuple[int, ...] = ()

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def statement(self, draw: Any) -> None:
        mesh_ndim = len(self.spec.mesh.shape)
        is_float = self.spec.dtype.is_floating_point
        ops = [op for op in self.ops if not (
            (op in ("sum", "redistribute_strided", "view") and self.ndim == 0)
            or (op == "matmul" and (self.ndim != 2 or not is_float))
        )] or ["elementwise"]
        op = draw(st.sampled_from(ops))
        add = self.lines.append
        if op == "elementwise":
            expr = draw(st.sampled_from(
                ["d + 1", "d * 2", "d - d", "d * d", "-d", "d.abs()", "d + d"]
                + (["torch.relu(d)", "d.sin()", "d / 2"] if is_float else [])
            ))
            add(f"    d = {expr}")
        elif op in ("redistribute", "redistribute_strided", "distribute"):
            target = draw(placements_st(mesh_ndim, self.ndim, partial=False, strided=op == "redistribute_strided"))
            code = ", ".join(placement_code(p) for p in target)
            if op == "distribute":
                add(f"    d = distribute_tensor(d.full_tensor(), mesh, [{code}])")
            else:
                add(f"    d = d.redistribute(mesh, [{code}])")
        elif op == "view":
            expr, self.shape = draw(st.sampled_from(_reshapes(self.shape)))
            add(f"    d = {expr}")
        elif op == "branch":
            i = draw(st.integers(0, mesh_ndim - 1))
            add(f"    if d.placements[{i}].is_shard():")
            add(f"        d = d * {draw(st.integers(2, 3))}")
            add("    elif d.placements[{}].is_partial():".format(i))
            add("        d = d.redistribute(mesh, [Replicate()] * mesh.ndim)")
            add("    else:")
            add("        d = d + 1")
        elif op == "query":
            add("    d = " + draw(st.sampled_from([
                "d * d.device_mesh.size()",
                "d + len(d.placements)",
                "d + sum(p.is_shard() for p in d.placements)",
                "d * (2 if d.device_mesh == mesh else 3)",
                "d + d.device_mesh.get_local_rank(0)",
            ])))
        elif op == "sum":
            if draw(st.booleans()):
                add("    d = d.sum()")
                self.shape = ()
            else:
                i = draw(st.integers(0, self.ndim - 1))
                add(f"    d = d.sum({i})")
                self.shape = self.shape[:i] + self.shape[i + 1:]
        elif op == "matmul":
            add("    d = torch.mm(d, d.transpose(0, 1).redistribute(mesh, [Replicate()] * mesh.ndim))")
            self.shape = (self.shape[0], self.shape[0])
        else:
            check = op == "from_local_checked"
            add(f"    d = DTensor.from_local(d.to_local(), mesh, d.placements, run_check={check}, "
                "shape=d.shape, stride=d.stride())")


@st.composite
def dtensor_programs(draw: Any, spec: DTensorSpec, *, max_ops: int = 4,
                     ops: tuple[str, ...] = DTENSOR_OPS, returns: tuple[str, ...] = DTENSOR_RETURNS) -> Program:
    """A DTensor program ``f(d, mesh)`` for a DTensor built from ``spec``: a
    few of ``ops`` (elementwise math, ``redistribute`` (to ``_StridedShard``
    too), views, reshapes, flatten/unflatten, transposes and permutes (of a
    sharded dim: ``_StridedShard``), branches on ``d.placements``, folded ``d.device_mesh`` /
    ``d.placements`` queries, ``sum``, ``matmul``, ``DTensor.from_local``
    round trips, ``distribute_tensor``); returns one of ``returns`` (by
    default ``full_tensor()``, ``to_local()`` and the placements)."""
    b = _DTensorBuilder(spec, ops, ["def f(d, mesh):"], tuple(spec.shape))
    draw(st.lists(_dtensor_statement(b), min_size=1, max_size=max_ops))
    result = returns[0] if len(returns) == 1 else draw(st.sampled_from(returns))
    b.lines.append(f"    return {result}")
    return Program("\n".join(b.lines) + "\n")


@st.composite
def _dtensor_statement(draw: Any, builder: _DTensorBuilder) -> None:
    builder.statement(draw)
