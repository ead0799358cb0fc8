"""Graph breaks and the user-facing text around them.

Every break dynamo_dist makes is declared once, in ``Break``: its ``gb_type``
(which ``dynamo_dist:`` prefixes), its explanation and at least one hint that
says what to do, as templates whose ``{fields}`` the break fills in. A break
is raised by name, as torch's ``unimplemented`` is called by keyword:
``graph_break(Break.NOT_FOLDABLE, context=..., what=..., type=...)``. The
declarations are checked when this module is imported, and each call's
fields against its declaration.
"""

from __future__ import annotations

import builtins
import enum
import logging
import string
from dataclasses import dataclass
from typing import Any, NoReturn

from .. import _compat as C

GB_PREFIX = "dynamo_dist:"
log = logging.getLogger("dynamo_dist.fold")
break_log = logging.getLogger("dynamo_dist.breaks")

# The one field a gb_type may hold: the tracked type's label (DeviceMesh,
# ProcessGroup, ...), one of a few fixed words, never per-call data.
GB_TYPE_FIELDS = frozenset({"label"})


class BreakDeclarationError(ValueError):
    """A graph break declared without what the user needs to read."""


@dataclass(frozen=True)
class BreakSpec:
    """What a graph break says: templates filled by ``graph_break``'s fields."""

    gb_type: str
    explanation: str
    hints: tuple[str, ...]


def _fields(template: str) -> set[str]:
    """The ``{field}`` names of a template; a positional ``{}`` or ``{0}``
    is not a field and fails (``BreakDeclarationError``)."""
    names = set()
    for _, field, _, _ in string.Formatter().parse(template):
        if field is None:
            continue
        if not field.isidentifier():
            raise BreakDeclarationError(f"{{{field}}} in {template!r} is not a named field")
        names.add(field)
    return names


def check_break(name: str, spec: BreakSpec) -> frozenset[str]:
    """The fields of a break's templates, once its declaration is checked:
    a gb_type without the prefix and without per-call data (only the
    tracked type's ``{label}``), an explanation, at least one hint, only
    named fields. Else ``BreakDeclarationError`` naming the break."""
    def fail(problem: str) -> NoReturn:
        raise BreakDeclarationError(f"graph break {name}: {problem}")

    if not isinstance(spec, BreakSpec):
        fail(f"declare it as a BreakSpec, not {spec!r}")
    if not isinstance(spec.gb_type, str) or not isinstance(spec.explanation, str):
        fail("gb_type and explanation must be strings")
    if not spec.gb_type.strip() or spec.gb_type.startswith(GB_PREFIX):
        fail(f"gb_type {spec.gb_type!r} must be non-empty text without the {GB_PREFIX!r} prefix")
    if not spec.explanation.strip():
        fail("an explanation is needed")
    if not isinstance(spec.hints, tuple) or not spec.hints or not all(
            isinstance(h, str) and h.strip() for h in spec.hints):
        fail("needs a tuple of at least one non-empty hint (what the user should do)")
    try:
        in_gb_type = _fields(spec.gb_type)
        fields = in_gb_type | _fields(spec.explanation) | set().union(*map(_fields, spec.hints))
    except BreakDeclarationError as e:
        fail(str(e))
    if not in_gb_type <= GB_TYPE_FIELDS:
        fail(f"gb_type may only name {sorted(GB_TYPE_FIELDS)} (no per-call data), not "
             f"{sorted(in_gb_type - GB_TYPE_FIELDS)}")
    return frozenset(fields)


@enum.unique
class Break(enum.Enum):
    """Every graph break dynamo_dist makes."""

    # -- members and calls of the tracked types -------------------------------
    UNSUPPORTED_MEMBER = BreakSpec(
        gb_type="unsupported {label} member",
        explanation="`{what}` is not supported inside a compiled region by dynamo_dist.",
        hints=("{hint}",),  # the member table row's hint
    )
    UNKNOWN_MEMBER = BreakSpec(
        gb_type="unsupported {label} member",
        explanation="`{what}` is not a member dynamo_dist can fold or trace, and stock torch has no safe "
        "handling for it either.",
        hints=("Move this access outside the compiled function and pass the result in.",
               "Supported {label} members: {members}."),
    )
    UNSUPPORTED_CALL = BreakSpec(
        gb_type="unsupported torch.distributed call",
        explanation="`{what}` creates distributed state (communicators, groups); it cannot run inside a "
        "compiled region.",
        hints=("{hint}",),  # the member table row's hint
    )
    # -- torch.distributed calls that cannot be in a graph (a row's ``cause``;
    #    fields: what, hint) ---------------------------------------------------
    OBJECT_COLLECTIVE = BreakSpec(
        gb_type="torch.distributed object collective",
        explanation="`{what}` pickles Python objects and moves them through host memory; a graph holds tensor "
        "operations only.",
        hints=("{hint}",),
    )
    HOST_BARRIER = BreakSpec(
        gb_type="torch.distributed barrier",
        explanation="`{what}` blocks the host until every rank reaches it; a graph has no host synchronisation to "
        "hold (the collectives in a graph synchronise through the tensors they produce).",
        hints=("{hint}",),
    )
    NO_FUNCTIONAL_COLLECTIVE = BreakSpec(
        gb_type="torch.distributed collective without a functional form",
        explanation="`{what}` has no functional collective in torch (the form a graph can hold, which returns a "
        "new tensor on every rank of the group); this one delivers to, or from, one rank.",
        hints=("{hint}",),
    )
    HOST_STATE_CALL = BreakSpec(
        gb_type="torch.distributed call on host state",
        explanation="`{what}` reads or changes the process's distributed state on the host (a backend object, "
        "a timeout, a profiling name); a graph cannot hold it.",
        hints=("{hint}",),
    )
    BACKEND_CALL = BreakSpec(
        gb_type="ProcessGroup call without a functional form",
        explanation="`{what}` asks the group's backend directly and returns its handle; only the calls with a "
        "functional collective form can be in a graph.",
        hints=("{hint}",),
    )
    # -- torch.distributed calls handed to torch ---------------------------------
    P2P_SWITCH_OFF = BreakSpec(
        gb_type="torch.distributed point-to-point call",
        explanation="`{what}` is point-to-point communication, which torch traces only with its switch on "
        "(TORCHDYNAMO_ENABLE_P2P_COMPILATION=1, or torch._dynamo.config.enable_p2p_compilation), and the "
        "switch is off.",
        hints=("Set TORCHDYNAMO_ENABLE_P2P_COMPILATION=1 before the program starts (torch then traces isend, "
               "irecv and batch_isend_irecv), or call it outside the compiled function.",),
    )
    P2P_NOT_TRACED = BreakSpec(
        gb_type="torch.distributed point-to-point call",
        explanation="`{what}` is point-to-point communication, which this torch cannot trace (its switch for "
        "it, TORCHDYNAMO_ENABLE_P2P_COMPILATION, came in torch 2.12).",
        hints=("Call it outside the compiled function, or use torch 2.12 or later with "
               "TORCHDYNAMO_ENABLE_P2P_COMPILATION=1.",),
    )
    NOT_TRACED_BY_TORCH = BreakSpec(
        gb_type="torch.distributed call torch cannot trace",
        explanation="`{what}` is traced as stock torch traces it (its own code; for point-to-point, with its "
        "switch on), which cannot trace this call: {reason}",
        hints=("Call it outside the compiled function and pass the result in; for point-to-point, isend, irecv and "
               "batch_isend_irecv are traced (with TORCHDYNAMO_ENABLE_P2P_COMPILATION=1).",),
    )
    FORM_NOT_TRACED = BreakSpec(
        gb_type="torch.distributed collective not traced here",
        explanation="`{what}` is traced as functional collectives, and tracing them failed here: {reason}",
        hints=("Call it outside the compiled function (and tell dynamo_dist's maintainers the call and this "
               "message: its traced form should cover it).",),
    )
    INPLACE_IN_FUNCTION_FORWARD = BreakSpec(
        gb_type="collective in an autograd.Function's forward (torch 2.11)",
        explanation="`{what}` writes its result in place inside an autograd.Function's forward; torch 2.11 loses "
        "the function's gradient when the forward it compiles returns a tensor changed in place (any in-place "
        "op; fixed in torch 2.12), so the function runs eagerly.",
        hints=("Use torch 2.12 or later to compile it.",),
    )
    REDUCE_OP_NOT_TRACEABLE = BreakSpec(
        gb_type="reduce op without a functional collective",
        explanation="`{what}` was given the reduce op {op}, which functional collectives cannot run (PREMUL_SUM "
        "carries a factor; a custom op has no name).",
        hints=("Scale the tensor in the graph and reduce with ReduceOp.SUM, or call it outside the compiled "
               "function.",),
    )
    OPTION_NOT_TRACEABLE = BreakSpec(
        gb_type="collective option without a functional form",
        explanation="`{what}` was given {option}, which its functional form cannot honour.",
        hints=("Pass the default for it, or call it outside the compiled function.",),
    )
    LIVE_WORK = BreakSpec(
        gb_type="wait on a collective started outside the graph",
        explanation="`{what}` waits for a collective the backend started outside the compiled region (before it, "
        "or eagerly at a graph break); a graph cannot wait on the backend's handle.",
        hints=("Call wait() before the compiled function, or start the collective inside it: a collective with "
               "async_op=True is traced there, and its wait() with it.",),
    )
    MESH_UNDER_CONSTRUCTION = BreakSpec(
        gb_type="DeviceMesh under construction",
        explanation="Dynamo reached a DeviceMesh whose constructor has not finished (mesh creation running "
        "inside a compiled region).",
        hints=("Create meshes once, outside the compiled function, and pass them in.",),
    )
    # -- answers and arguments ------------------------------------------------
    ARGUMENT_NOT_CONSTANT = BreakSpec(
        gb_type="argument is not a trace-time constant",
        explanation="`{what}` was called with an argument whose value is only known when the graph runs (a "
        "tensor or a dynamic value), so it cannot be folded.",
        hints=("Pass Python ints/strings (not tensors or SymInts) to mesh, placement and process-group queries.",
               "If the value comes from a tensor, compute it outside the compiled function."),
    )
    SEQUENCE_NOT_READABLE = BreakSpec(
        gb_type="sequence argument cannot be read",
        explanation="`{what}` got a {got} that Dynamo cannot iterate at trace time ({reason}), so its "
        "placements cannot be folded.",
        hints=("Pass a list or tuple of placements, e.g. `list(placements)` built outside the compiled "
               "function, or give the class an `__iter__` Dynamo can trace.",),
    )
    NOT_FOLDABLE = BreakSpec(
        gb_type="query result is not foldable",
        explanation="`{what}` returned a {type}, which is neither a constant nor a mesh, placement or process "
        "group, so it cannot be folded into the graph.",
        hints=("Compute it outside the compiled function and pass the result in.",),
    )
    NON_BUILTIN_EXCEPTION = BreakSpec(
        gb_type="query raised a non-builtin exception",
        explanation="The query raised {exc_type}: {exc}. Dynamo can only re-raise builtin exception types "
        "inside a compiled region.",
        hints=("Fix the call so it does not raise, or make it outside the compiled function.",),
    )
    IDENTITY_HASH = BreakSpec(
        gb_type="identity hash of a derived object",
        explanation="hash() of an object that hashes by identity (a process group taken from a mesh) cannot "
        "be folded on this torch: nothing pins the object.",
        hints=("Use `hash(pg.group_name)` instead, or pass the group in as an argument.",),
    )
    IDENTITY_UNKNOWN = BreakSpec(
        gb_type="identity of objects not known while tracing",
        explanation="`a is b` between two objects the compiled region only knows exist (the autograd nodes of "
        "two traced tensors: the outputs of one `split` share theirs) cannot be answered while tracing.",
        hints=("Make the comparison outside the compiled function.",),
    )
    # -- objects that escape, DTensors ----------------------------------------
    NOT_RECONSTRUCTIBLE = BreakSpec(
        gb_type="{label} cannot be reconstructed",
        explanation="A {label} built inside the compiled region escapes it, and dynamo_dist does not know how "
        "to rebuild it in bytecode.",
        hints=("Return the inputs you need instead of the {label}, or build it outside.",),
    )
    DISTRIBUTE_REQUIRES_GRAD = BreakSpec(
        gb_type="distribute_tensor of a tensor that requires grad",
        explanation="distribute_tensor returns a new leaf DTensor that requires grad (a parameter); a compiled "
        "graph cannot create leaves.",
        hints=("Distribute parameters once, outside the compiled function (e.g. when building the model), or "
               "pass `tensor.detach()`.",),
    )
    DISTRIBUTE_CONSTRAINED = BreakSpec(
        gb_type="distribute_tensor shards a dim marked dynamic",
        explanation="distribute_tensor splits dim {dims} of its tensor, whose size depends on a size marked "
        "dynamic (torch._dynamo.mark_dynamic); tracing the split can specialize that size (a shard of size 1, "
        "an uneven split), which Dynamo refuses for a marked size, so distribute_tensor runs eagerly.",
        hints=("Distribute the tensor outside the compiled function and pass the DTensor in, or use "
               "torch._dynamo.maybe_mark_dynamic, which lets the trace specialize.",),
    )
    SPECIALIZES_MARKED_SIZE = BreakSpec(
        gb_type="a DTensor call fixes a size marked dynamic",
        explanation="{what} splits a size that depends on one marked dynamic (torch._dynamo.mark_dynamic: "
        "{sizes}), and tracing the split fixes that size to one value (a rank's piece of size 1, an uneven "
        "split), which Dynamo refuses for a marked size (ConstraintViolationError), so the call runs eagerly.",
        hints=("Use torch._dynamo.maybe_mark_dynamic, which lets the trace specialize, or mark the size only "
               "where each rank's piece of it is larger than 1.",),
    )
    RANK_DEPENDENT_SIZES = BreakSpec(
        gb_type="DTensor shapes of every rank under dynamic sizes",
        explanation="{what} shards a dynamic size over {count} coordinates of the mesh, and each rank's piece "
        "of it has its own size; to decide alike on every rank, each rank checks the sizes of every other "
        "rank's piece while tracing, which is refused here ({why}), so the call runs eagerly.",
        hints=("Keep the sharded size static (torch._dynamo.mark_static, or a fixed size) or shard it over "
               "fewer ranks inside the compiled region.",),
    )
    DTENSOR_MODE = BreakSpec(
        gb_type="DTensor mode entered inside the compiled region",
        explanation="`{what}` changes how DTensor dispatches ops ({why}) for the code it wraps; Dynamo traces "
        "DTensor ops without that change, so the `with` is entered eagerly (a graph break) and the code inside "
        "it is compiled with the mode on.",
        hints=("{hint}",),  # the mode table row's hint
    )
    GRAD_FN_NODE = BreakSpec(
        gb_type="autograd node of a traced tensor",
        explanation="{what} needs the autograd node of a tensor computed in the compiled region; while tracing "
        "only its existence is known (`t.grad_fn is None` and `if t.grad_fn:` are answered, as leaf checks use "
        "them), not which node it will be.",
        hints=("Read the autograd graph outside the compiled function, from its outputs.",),
    )
    # -- spmd_types ----------------------------------------------------------
    SPMD_NOT_RUN = BreakSpec(
        gb_type="spmd_types call runs eagerly",
        explanation="spmd_types' {what} could not run on the traced values while tracing ({why}); the call "
        "runs eagerly, where spmd_types does exactly what it does without torch.compile.",
        hints=("Keep the call: the code around it still compiles. To have it compiled, give it plain tensors "
               "and values known when tracing (no SymInt sizes in global type checking).",),
    )
    SPMD_CHECKER_ENTERED = BreakSpec(
        gb_type="spmd_types checker entered inside the compiled region",
        explanation="`{what}` with no checker current starts spmd_types' type checking: it patches torch "
        "(autograd.Function.apply, vmap, module hooks) and pushes a torch-function mode, which cannot happen "
        "inside a graph; the `with` runs eagerly and the code inside it is compiled under the checker.",
        hints=("Enter `with spmd_types.checker.typecheck():` around the call of the compiled function instead; "
               "a compiled function checks its types while it is traced, at no run-time cost.",),
    )

    def __init__(self, spec: BreakSpec) -> None:
        self.fields = check_break(self.name, spec)

    @property
    def gb_type(self) -> str:
        return self.value.gb_type

    @property
    def explanation(self) -> str:
        return self.value.explanation

    @property
    def hints(self) -> tuple[str, ...]:
        return self.value.hints

    def render(self, fields: dict[str, Any]) -> tuple[str, str, list[str]]:
        """(gb_type with the prefix, explanation, hints), filled with ``fields``:
        exactly the fields the templates name."""
        if set(fields) != self.fields:
            raise TypeError(f"graph break {self.name} takes the fields {sorted(self.fields)}, "
                            f"not {sorted(fields)}")
        return (f"{GB_PREFIX} {self.gb_type.format(**fields)}", self.explanation.format(**fields),
                [hint.format(**fields) for hint in self.hints])


# The fields a member table row's ``cause`` is filled with.
CAUSE_FIELDS = frozenset({"what", "hint"})


def check_causes(table: Any) -> None:
    """Every ``cause`` of a member table's rows is a declared break that
    takes exactly ``CAUSE_FIELDS`` (``BreakDeclarationError`` naming it)."""
    for name, member in table.items():
        cause = getattr(member, "cause", None)
        if cause is not None and (not isinstance(cause, Break) or cause.fields != CAUSE_FIELDS):
            raise BreakDeclarationError(f"member table {table.name!r}: {name}: cause {cause!r} must be a Break "
                                        f"taking the fields {sorted(CAUSE_FIELDS)}")


def graph_break(declared: Break, /, *, context: str, **fields: Any) -> NoReturn:
    """A clean, explained graph break: the ``declared`` one, its templates
    filled with ``fields``. ``context`` is the per-call detail Dynamo reports
    with it."""
    gb_type, explanation, hints = declared.render(fields)
    break_log.debug("graph break %s (%s): %s Hint: %s", gb_type, context, explanation, " Hint: ".join(hints))
    C.dynamo.break_graph(gb_type, context, explanation, hints)
    raise AssertionError(f"graph break {declared.name}: Dynamo did not break the graph")


def raise_like_eager(tx: Any, exc: BaseException) -> NoReturn:
    """Re-raise an exception the real object raised, as the user's program
    would see it in eager mode."""
    exc_type = type(exc)
    if getattr(builtins, exc_type.__name__, None) is exc_type:
        C.dynamo.raise_observed(exc_type, tx, [str(a) for a in exc.args] or [str(exc)])
    graph_break(Break.NON_BUILTIN_EXCEPTION, context=f"{exc_type.__name__}: {exc}",
                exc_type=exc_type.__name__, exc=exc)


def short_repr(value: Any) -> str:
    """Short, user-facing text for a folded value."""
    if isinstance(value, C.distributed.ProcessGroup):
        return f"ProcessGroup(name={value.group_name!r}, size={value.size()})"
    if isinstance(value, (list, tuple)) and any(isinstance(v, C.distributed.ProcessGroup) for v in value):
        return f"[{', '.join(short_repr(v) for v in value)}]"
    return repr(value)


def first_line(error: BaseException, limit: int = 200) -> str:
    """An error's first line (at most ``limit`` characters), or its type's
    name when it has no text: how a break quotes the error it stands for."""
    text = str(error).strip()
    return text.splitlines()[0][:limit] if text else type(error).__name__


def short_args_repr(pargs: list, pkwargs: dict) -> str:
    """``1, 'tp', dim=0`` for the arguments of a folded call."""
    return ", ".join([*map(short_repr, pargs), *(f"{k}={short_repr(v)}" for k, v in pkwargs.items())])
