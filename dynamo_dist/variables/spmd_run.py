"""spmd_types' own code, run at trace time on what the frame traces.

spmd_types keeps everything its checker decides in two places: attributes of
tensors (a tensor's local types and PartitionSpec) and its thread's state
(the current checker with its switches, the current mesh). Neither is a
tensor value: both are known while Dynamo traces, from the frame's inputs
(guarded) and what the frame did to them. So its checker, and its functions
that read or write types or state, run here as themselves, at trace time,
never traced and never copied:

- a frame's spmd_types state starts as the thread's state when the frame is
  called (``frame_state``: guarded, ``guards.spmd``) and changes as the
  frame's ``with no_typecheck():`` / ``set_current_mesh(...)`` do; spmd_types'
  code runs with it put in the thread's place (``_compat.spmd.installed``);
- a traced tensor is given to that code as a stand-in: its fake value, with
  the tensor's types as Dynamo sees them now (an attribute the frame set, or
  the input's own, guarded) put on it for the call and taken off after;
- what the code changes on a stand-in is written back to the traced tensor
  as Dynamo writes any attribute (a side effect, replayed at run time on the
  tensors that outlive the frame, so outputs leave with the types eager's
  checker would leave on them);
- its answer comes back as trackers: a stand-in as its tensor, anything else
  as the value it is.

A frame that runs no spmd_types code installs none of these guards.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

from .. import _compat as C
from ..guards.spmd import install_state_guard, install_types_guard

S = C.spmd
_ABSENT = object()


class CannotRun(Exception):
    """spmd_types' code could not be run at trace time on these values: the
    call runs eagerly (a clean graph break), where it does what eager does."""


# -- the frame's spmd_types state -----------------------------------------------

def frame_state(tx: Any) -> S.State:
    """The frame's spmd_types state now: the thread's when the frame was
    called (guarded the first time it is read), as the frame changed it since."""
    fs = C.dynamo.frame_state(tx, "spmd")
    if "state" not in fs:
        fs["state"] = S.capture()
        install_state_guard(tx)
    return fs["state"]


def set_frame_state(tx: Any, state: S.State) -> None:
    C.dynamo.frame_state(tx, "spmd")["state"] = state


def note_checker(tx: Any) -> None:
    """The frame runs under the checker: its graphs run with the checker
    off the mode stack (``runtime``), since it checked them here."""
    C.dynamo.frame_state(tx, "spmd")["checker"] = True


def frame_has_checker(output_graph: Any) -> bool:
    return bool(output_graph.__dict__.get("_dynamo_dist_spmd", {}).get("checker"))


def paused_by_frames(tx: Any) -> bool:
    """0.3.1: a function registered with ``register_no_typecheck`` is being
    traced (the frame or a function inlined into it) or called the frame
    (its callers: guarded with the state)."""
    codes = S.no_typecheck_codes()
    if not codes:
        return False
    return any(code in codes for code in C.dynamo.frame_codes(tx)) or S.callers_pause_checking()


@contextlib.contextmanager
def applying_function(tx: Any) -> Iterator[None]:
    """The block traces an ``autograd.Function``'s apply under the checker."""
    fs = C.dynamo.frame_state(tx, "spmd")
    fs["applying"] = fs.get("applying", 0) + 1
    try:
        yield
    finally:
        fs["applying"] -= 1


def inside_applied_function(tx: Any) -> bool:
    """Tracing inside an applied Function's forward, which eager's checker
    does not see (it runs the Function off the mode stack)."""
    return C.dynamo.frame_state(tx, "spmd").get("applying", 0) > 0


@contextlib.contextmanager
def running(tx: Any) -> Iterator[None]:
    """spmd_types' code runs in the block on the frame's state; the state it
    leaves becomes the frame's."""
    state = frame_state(tx)
    if paused_by_frames(tx) and state.mode is not None:
        state = S.State(state.mode, state.strict, state.local, True, state.mesh_stack)
    with S.installed(state) as left:
        yield
    if left and left[0] != state:
        set_frame_state(tx, left[0])


# -- stand-ins ---------------------------------------------------------------------

class StandIns:
    """The traced tensors of one call of spmd_types' code, each given to it as
    its fake value with its types on it; ``write_back`` writes what the code
    changed to the traced tensors."""

    def __init__(self, tx: Any) -> None:
        self.tx = tx
        # id(fake) -> (fake, [(tracker of that tensor, its types before the call)])
        self._by_fake: dict[int, tuple[Any, list]] = {}
        self._given: dict[int, list] = {}  # id(fake) -> the trackers this call was given

    def __enter__(self) -> StandIns:
        return self

    def __exit__(self, *exc: Any) -> None:
        for fake, _ in self._by_fake.values():
            for name in S.TYPE_ATTRS:
                fake.__dict__.pop(name, None)

    # -- trackers -> values --------------------------------------------------
    def real(self, vt: Any) -> Any:
        """The value spmd_types' code gets for a tracker."""
        if C.dynamo.is_tensor(vt):
            return self.tensor(vt)
        items = C.dynamo.list_items(vt)
        if items is not None:
            values = [self.real(i) for i in items]
            return values if vt.python_type() is list else tuple(values)
        pairs = C.dynamo.dict_items(vt)
        if pairs is not None:
            return {self.real(k): self.real(v) for k, v in pairs}
        fields = C.dynamo.dataclass_fields(self.tx, vt)
        if fields is not None:  # S(0) built in the frame: its fields are trackers
            cls, values = fields
            return cls(**{name: self.real(v) for name, v in values.items()})
        value = C.dynamo.symbolic_value(vt)
        if value is C.dynamo.NO_KNOWN_VALUE:
            value = C.dynamo.known_value(vt)
        if value is C.dynamo.NO_KNOWN_VALUE:
            raise CannotRun(f"a {vt.python_type().__name__} whose value is not known while tracing")
        if _holds_tensor(value):
            raise CannotRun("a value holding tensors Dynamo does not trace")
        return value

    def tensor(self, vt: Any) -> Any:
        fake = C.dynamo.example_value(vt)
        if not isinstance(fake, torch.Tensor):
            raise CannotRun("a tensor without a fake value")
        entry = self._by_fake.get(id(fake))
        if entry is None:
            entry = self._by_fake[id(fake)] = (fake, [])
            for alias in _aliases(self.tx, fake):
                self._join(entry, alias)
        if not any(v is vt for v in self._given.setdefault(id(fake), [])):
            self._given[id(fake)].append(vt)
        if not any(v is vt for v, _ in entry[1]):
            self._join(entry, vt)
            _aliases(self.tx, fake).append(vt)
        return fake

    def _join(self, entry: tuple, vt: Any) -> None:
        """Trackers with one fake value are one tensor in eager (``x.float()``
        of a float ``x``, an in-place op's result): one set of types, written
        to all of them. A tracker that knows none (a result not typed in the
        frame) takes the types another knows; two that know different ones
        cannot both be the tensor's."""
        fake = entry[0]
        before = read_types(self.tx, vt)
        known = [b for _, b in entry[1] if b is not None]
        if before is not None and known and not all(_same_types(before, b) for b in known):
            raise CannotRun("two traced values of one tensor (an alias) carry different types")
        entry[1].append((vt, before))
        if before is not None and not known or not entry[1][:-1]:
            for name, value in zip(S.TYPE_ATTRS, before or (_ABSENT,) * len(S.TYPE_ATTRS)):
                if value is _ABSENT:
                    fake.__dict__.pop(name, None)
                else:
                    setattr(fake, name, _copy(value))

    def traced_ids(self) -> set:
        """The ids of the stand-ins (the traced tensors' fake values)."""
        return set(self._by_fake)

    def adopt(self, vt: Any) -> Any:
        """``vt``'s tensors as stand-ins, for an answer spmd_types' code gets
        back from the call it made (a result, with no types unless it is one
        of the arguments)."""
        return self.real(vt)

    # -- values -> trackers --------------------------------------------------
    def tracker(self, value: Any) -> Any:
        """The tracker of a value spmd_types' code returned."""
        if isinstance(value, torch.Tensor):
            entry = self._by_fake.get(id(value))
            if entry is None:
                raise CannotRun("it returned a tensor that is not one of the traced tensors")
            return self._given[id(value)][0]
        if isinstance(value, (list, tuple)) and type(value) in (list, tuple) and _holds_tensor(value):
            items = [self.tracker(v) for v in value]
            return C.dynamo.make_list(items) if type(value) is list else C.dynamo.make_tuple(items)
        if _holds_tensor(value):
            raise CannotRun(f"it returned a {type(value).__name__} holding tensors")
        return C.dynamo.build_value(self.tx, value)

    def write_back(self) -> None:
        """Every type the call changed on a stand-in, written to its tensor."""
        for fake, trackers in self._by_fake.values():
            for vt, before in trackers:
                for name, old in zip(S.TYPE_ATTRS, before or (_ABSENT,) * len(S.TYPE_ATTRS)):
                    new = fake.__dict__.get(name, _ABSENT)
                    if _same(new, old):
                        continue
                    if new is _ABSENT:
                        C.dynamo.delete_attribute(self.tx, vt, name)
                    else:
                        C.dynamo.set_attribute(self.tx, vt, name, C.dynamo.build_value(self.tx, _copy(new)))


def _aliases(tx: Any, fake: Any) -> list:
    """The trackers of ``fake`` spmd_types' code has seen in the graph
    being traced (one tensor in eager; a subgraph's input that shares an
    outer tensor's fake value is not written from inside it)."""
    by_fake = C.dynamo.scope_state(tx, "spmd_aliases")
    held = by_fake.get(id(fake))
    if held is None or held[0] is not fake:
        held = by_fake[id(fake)] = (fake, [])
    return held[1]


def read_types(tx: Any, vt: Any) -> tuple | None:
    """A traced tensor's (local type, PartitionSpec) as Dynamo sees them now:
    set in this frame, or the input's own (guarded); None where the tracker
    knows neither (a tensor made in the frame and never typed there)."""
    found = []
    real = None
    known = False
    for name in S.TYPE_ATTRS:
        pending, value_vt = C.dynamo.pending_attribute(tx, vt, name)
        if pending:
            known = True
            found.append(_ABSENT if C.dynamo.is_deleted(value_vt) else _python(value_vt))
            continue
        if real is None:
            real = C.dynamo.graph_input_value(vt) if vt.source is not None else None
            if real is not None:
                install_types_guard(tx, vt.source, real)
        known = known or real is not None
        found.append(_ABSENT if real is None else real.__dict__.get(name, _ABSENT))
    return tuple(found) if known else None


def _python(vt: Any) -> Any:
    value = C.dynamo.known_value(vt)
    if value is C.dynamo.NO_KNOWN_VALUE:
        raise CannotRun("a tensor's type was set to a value whose value is not known while tracing")
    return value


def _copy(value: Any) -> Any:
    # Types are plain dicts (mutated in place by assert_type) or immutable.
    return dict(value) if type(value) is dict else value


def _same_types(a: tuple, b: tuple) -> bool:
    return all(_same(x, y) for x, y in zip(a, b))


def _same(a: Any, b: Any) -> bool:
    if a is _ABSENT or b is _ABSENT:
        return a is b
    return type(a) is type(b) and a == b


def _holds_tensor(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (list, tuple)):
        return any(_holds_tensor(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_tensor(v) for v in value.values())
    return False


# -- the call ------------------------------------------------------------------------

def run(tx: Any, fn: Any, args: list, kwargs: dict, what: str) -> Any:
    """``fn(*args, **kwargs)``, spmd_types' own function, run now on the
    frame's state and the traced tensors' types; its changes written back,
    its answer as a tracker. An error it raises is raised in the traced
    program, as eager raises it there."""
    with StandIns(tx) as s:
        try:
            pargs = [s.real(a) for a in args]
            pkwargs = {k: s.real(v) for k, v in kwargs.items()}
            with running(tx):
                result = fn(*pargs, **pkwargs)
            answer = s.tracker(result)
        except CannotRun:
            raise
        except Exception as e:  # eager raises it here
            raise_in_program(tx, e)
        s.write_back()
        return answer


def raise_in_program(tx: Any, e: BaseException) -> Any:
    """Raise ``e`` where the traced program is (its own exception type and
    message): Dynamo runs an uncaught one eagerly, which raises it as eager
    does, from the user's line."""
    C.dynamo.raise_observed(type(e), tx, [str(a) for a in e.args] or [str(e)])


# -- the checker -------------------------------------------------------------------

class _Opaque:
    """Stands for a result spmd_types' checker only passes on (a size with
    symbols, ...)."""


class _Answering(torch.overrides.TorchFunctionMode):
    """While the checker's rule for one call runs at trace time: the call it
    makes to compute that call's result (``func(*args)``, on the stand-ins)
    gets the traced result instead of running; everything else it calls runs
    (its shard propagation on meta tensors, ``assert_type`` ...), except an
    ``autograd.Function`` or a collective on traced tensors, which could not
    run on fake values: the call then runs eagerly (``CannotRun``)."""

    def __init__(self, func: Any, tensors: list, answer: Any, traced: set) -> None:
        super().__init__()
        self.func, self.tensors, self.answer, self.answered, self.traced = func, tensors, answer, False, traced

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        leaves = _leaves(args, kwargs)
        if not self.answered and _same_function(func, self.func) and leaves == self.tensors:
            self.answered = True
            return self.answer
        if (S.autograd_apply_class(func) is not None or func in S.functions()) and self.traced.intersection(leaves):
            raise CannotRun(f"its rule calls {getattr(func, '__qualname__', func)!r} on the traced values")
        return func(*args, **kwargs)


class _Apply:
    """Stands for ``cls.apply`` in the checker's rule (the same name and
    class, equal to it): calling it gives the traced result."""

    def __init__(self, real: Any, answer: Any) -> None:
        self._real, self._answer = real, answer
        self.__name__ = "apply"
        self.__self__ = real.__self__
        self.__func__ = getattr(real, "__func__", None)

    def __eq__(self, other: object) -> bool:
        return other is self or self._real == other

    def __hash__(self) -> int:
        return hash(self._real)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._answer


def _same_function(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return bool(a == b) and type(a) is type(b)
    except Exception:
        return False


def _leaves(args: Any, kwargs: Any) -> list:
    """The tensors among ``args`` and ``kwargs`` (nested in lists, tuples,
    dicts), by identity, in order."""
    found: list = []

    def walk(v: Any) -> None:
        if isinstance(v, torch.Tensor):
            found.append(id(v))
        elif isinstance(v, (list, tuple)):
            for i in v:
                walk(i)
        elif isinstance(v, dict):
            for i in v.values():
                walk(i)

    walk(args)
    walk(kwargs)
    return found


def _answer_of(s: StandIns, vt: Any) -> Any:
    """The traced result as the checker's rule gets it: its tensors as
    stand-ins, anything not known now as a token it only passes on."""
    if C.dynamo.is_tensor(vt):
        return s.tensor(vt)
    items = C.dynamo.list_items(vt)
    if items is not None:
        values = [_answer_of(s, i) for i in items]
        return values if vt.python_type() is list else tuple(values)
    value = C.dynamo.known_value(vt)
    return _Opaque() if value is C.dynamo.NO_KNOWN_VALUE else value


def _is_answer(out: Any, answer: Any) -> bool:
    if out is answer:
        return True
    if isinstance(out, (list, tuple)) and isinstance(answer, (list, tuple)) and len(out) == len(answer):
        return all(_is_answer(o, a) for o, a in zip(out, answer))
    return isinstance(answer, (int, float, bool, str, type(None))) and out == answer


def check(tx: Any, mode: Any, fn: Any, types: Any, args: list, kwargs: dict, result: Any,
          func: Any = None) -> None:
    """The checker's own ``__torch_function__`` for the call ``fn(*args,
    **kwargs)``, whose traced result is ``result``, run now on stand-ins: the
    types it sets are written back, an error it raises is raised in the
    traced program. ``CannotRun`` when it cannot run here. ``func``: the
    function called, where ``fn``'s tracker does not hold it (an applied
    Function's ``apply`` through the checker's descriptor)."""
    func = C.dynamo.known_value(fn) if func is None else func
    if func is C.dynamo.NO_KNOWN_VALUE:
        raise CannotRun("the function called is not known while tracing")
    type_classes = C.dynamo.known_value(types) if types is not None else ()
    if type_classes is C.dynamo.NO_KNOWN_VALUE:
        type_classes = ()
    with StandIns(tx) as s:
        pargs = tuple(s.real(a) for a in args)
        pkwargs = {k: s.real(v) for k, v in kwargs.items()}
        answer = _answer_of(s, result)
        call = _Apply(func, answer) if S.autograd_apply_class(func) is not None else func
        try:
            with running(tx), _Answering(func, _leaves(pargs, pkwargs), answer, s.traced_ids()):
                out = mode.__torch_function__(call, tuple(type_classes), pargs, pkwargs)
        except CannotRun:
            raise
        except Exception as e:  # the checker's verdict: eager raises it here
            raise_in_program(tx, e)
        if not _is_answer(out, answer):
            raise CannotRun("the checker's rule for it returned a value of its own")
        s.write_back()
