"""Stable descriptions of Python values, for compile-cache keys.

``describe(value)`` gives nested tuples of strings and numbers, the same in
every process for values that behave the same, or raises ``Undescribable``
with the path to the part it cannot describe and why. What is described, and
why the description is the whole of what the value does:

- plain values (None, bool, int, float, complex, str, bytes, Ellipsis) and
  torch's value types (dtype, device, layout, memory format, ``torch.Size``):
  by value; the value is all they are. Tracked objects (meshes, process
  groups, placements): by ``keys.constant_identity``, the key identity their
  type declares (``tracked_types``; layout and group names); a tracked
  object whose type declares none (a user's placement) is undescribable.
- operators (``OpOverload``, ``OpOverloadPacket``, higher-order ops): by
  their registered name, which names the same operator in every process.
- tuples, lists, sets, frozensets, dicts: by their items (dicts in insertion
  order, sets in the order of their items' descriptions). Lists, dicts and
  sets are mutable: they are described by the value they hold *now* (see
  ``checkpoint_policies`` for when that is sound).
- enum members (by class and name) and dataclass instances (by class and the
  value of each field and instance attribute). Their classes: by qualified
  name, dataclass parameters, fields, members, class attributes and the code
  of every method the class body defines (methods ``dataclasses`` generates
  are fixed by the parameters and fields). Other classes of torch and of
  ``builtins``: by name; their code is torch's (every key holds torch's
  source digest) or Python's. Any other class: undescribable (what its
  instances do is code this module does not read).
- functions: by their code (bytecode, constants, names, nested code; not
  their name, file or line numbers), defaults, attributes, the current value
  of every closure cell and of every global the code (or code nested in it)
  loads. A global that is a module is described by the values of the
  attribute paths the code reads from it (``torch.ops.aten.mm.default``), a
  module used any other way is undescribable. Imports in their body (or in
  code nested in it) are read like globals: ``from M import a`` by ``M``'s
  name, ``a`` and the current value of ``M.a``; a module stored in a local
  (``import M.sub``, ``import M.sub as s``, ``from M import sub``) by the
  attribute paths the code reads from that local; relative imports resolved
  against the function's ``__package__``. Undescribable: an import of a
  module not imported yet (describing it would run its code), a module local
  used any other way, an import whose result goes elsewhere than a local.
  Builtins: by name, only those that answer from their arguments alone (not
  ``id``, ``hash``, ``open``...).
  torch's ``create_selective_checkpoint_contexts``: by name (it builds the
  dispatch modes around the policy it is given and reads nothing else); other
  Python functions of torch are described by their code like any other.
- bound methods (object and function), ``functools.partial`` (function,
  arguments).

Anything else (arbitrary objects, C functions not known to be pure,
generators, modules as values) is undescribable.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import dis
import enum
import functools
import importlib.util
import sys
import types
from typing import Any, Iterator

import torch

from .. import _compat as C
from .. import tracked_types
from .keys import PLAIN, TORCH_VALUES, constant_identity

# Builtins whose answer is a function of their arguments alone. Not ``id`` or
# ``hash`` (an object's address; a str's hash changes with PYTHONHASHSEED),
# nor anything that reads or writes the process's state.
_PURE_BUILTINS = frozenset({
    "abs", "all", "any", "ascii", "bin", "callable", "chr", "divmod", "format", "getattr", "hasattr", "hex",
    "isinstance", "issubclass", "iter", "len", "max", "min", "next", "oct", "ord", "pow", "print", "repr",
    "round", "sorted", "sum",
})
# Modules of C functions that answer from their arguments alone.
_PURE_BUILTIN_MODULES = frozenset({"math", "operator", "_operator"})
# torch's Python functions described by name: each answers from its arguments
# alone (read in its source), and its code is torch's, which every key holds.
# ``create_selective_checkpoint_contexts(policy_fn_or_list, ...)`` builds the
# two dispatch modes around the policy (a list of ops: a policy saving exactly
# those) and reads nothing else. Other torch functions are described by code.
_PURE_TORCH_FUNCTIONS = frozenset({
    "torch.utils.checkpoint.create_selective_checkpoint_contexts",
    "torch.utils.checkpoint.noop_context_fn",
})

# Class attributes that are bookkeeping, not behaviour.
_CLASS_BOOKKEEPING = frozenset({
    "__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__annotations__", "__slots__",
    "__dataclass_fields__", "__dataclass_params__", "__match_args__", "__orig_bases__", "__parameters__",
    "__static_attributes__", "__firstlineno__",
})
# Methods ``dataclasses`` writes (from the fields and parameters, which are described).
_DATACLASS_GENERATED = frozenset({
    "__init__", "__repr__", "__eq__", "__lt__", "__le__", "__gt__", "__ge__", "__hash__", "__setattr__",
    "__delattr__", "__getstate__", "__setstate__", "__replace__",
})
_DATACLASS_PARAMS = ("init", "repr", "eq", "order", "unsafe_hash", "frozen")
_LOAD_GLOBAL = frozenset({"LOAD_GLOBAL", "LOAD_NAME"})
_LOAD_ATTR = frozenset({"LOAD_ATTR", "LOAD_METHOD"})
_LOAD_LOCAL = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_DEREF", "LOAD_CLASSDEREF"})  # a local or a cell
_STORE_LOCAL = frozenset({"STORE_FAST", "STORE_DEREF"})
# Instructions naming a local without using its value: its cell made, or handed
# to nested code (whose loads of it are read by name), the local deleted.
_NOT_A_USE = frozenset({"MAKE_CELL", "LOAD_CLOSURE", "DELETE_FAST", "DELETE_DEREF", *_STORE_LOCAL})
# What pushes an import's level and fromlist (3.14 pushes small ints with LOAD_SMALL_INT).
_LOAD_CONSTANT = frozenset({"LOAD_CONST", "LOAD_SMALL_INT"})


class Undescribable(Exception):
    """A value has no description; the message says where and why."""


def describe(value: Any) -> tuple:
    """The description of ``value`` (see the module doc); raises ``Undescribable``."""
    return _Describer().value(value)


def _qualified_name(obj: Any) -> str:
    return f"{getattr(obj, '__module__', None)}.{getattr(obj, '__qualname__', type(obj).__qualname__)}"


def _importable_as_itself(obj: Any) -> bool:
    """Whether ``module.qualname`` of ``obj`` finds ``obj`` itself (so its
    name names it in every process)."""
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    found: Any = module
    for part in getattr(obj, "__qualname__", "<locals>").split("."):
        if part == "<locals>" or found is None:
            return False
        found = getattr(found, part, None)
    return found is obj


def _is_torch(obj: Any) -> bool:
    module = getattr(obj, "__module__", None) or ""
    return module == "torch" or module.startswith("torch.")


def _generated_by_dataclasses(fn: Any) -> bool:
    """Whether ``fn`` is a method ``dataclasses`` wrote (its source is a
    string it executed; ``__repr__`` comes wrapped)."""
    while hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    return isinstance(fn, types.FunctionType) and fn.__code__.co_filename == "<string>"


def _instructions(code: types.CodeType) -> list[dis.Instruction]:
    return [i for i in dis.get_instructions(code) if i.opname != "EXTENDED_ARG"]


def _nested(code: types.CodeType) -> Iterator[types.CodeType]:
    """``code`` and the code nested in it."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _nested(const)


def _reads(code: types.CodeType, loads: frozenset[str]) -> dict[str, set[tuple[str, ...]]]:
    """name -> the attribute paths read right after loading it with one of
    ``loads``, in ``code`` and the code nested in it (``()``: used as is)."""
    reads: dict[str, set[tuple[str, ...]]] = {}
    for inner in _nested(code):
        instructions = _instructions(inner)
        for n, ins in enumerate(instructions):
            if ins.opname in loads:
                path = []
                for follower in instructions[n + 1:]:
                    if follower.opname not in _LOAD_ATTR:
                        break
                    path.append(follower.argval)
                reads.setdefault(ins.argval, set()).add(tuple(path))
    return reads


def _local_reads(code: types.CodeType) -> dict[str, set[tuple[str, ...]]]:
    """``_reads`` of the locals and cells of ``code`` and the code nested in
    it. A name is followed into all nested code: a closure's variable there is
    the same variable, another local of that name only adds reads. Any other
    instruction naming a local (a later Python's fused loads) uses it as is."""
    reads = _reads(code, _LOAD_LOCAL)
    for inner in _nested(code):
        for ins in _instructions(inner):
            if ins.opname not in _LOAD_LOCAL | _NOT_A_USE and ("FAST" in ins.opname or "DEREF" in ins.opname):
                for name in ins.argval if isinstance(ins.argval, tuple) else (ins.argval,):
                    reads.setdefault(name, set()).add(())
    return reads


@dataclasses.dataclass(frozen=True)
class _Import:
    """An import statement: ``__import__(name, fromlist=fromlist, level=level)``,
    then, for each local it binds, the attributes taken from the module it
    returns (``IMPORT_FROM``) on the way to that local."""

    name: str
    level: int
    fromlist: tuple[str, ...] | None
    bindings: tuple[tuple[str, tuple[str, ...]], ...]
    unfollowed: str | None = None  # the instruction that takes the result elsewhere

    def __str__(self) -> str:
        if self.fromlist is None:
            return f"import {self.name}"
        return f"from {'.' * self.level}{self.name} import {', '.join(self.fromlist)}"


def _import_statements(code: types.CodeType) -> list[_Import]:
    """The import statements of ``code`` and the code nested in it."""
    return [_import_at(instructions, n)
            for instructions in map(_instructions, _nested(code))
            for n, ins in enumerate(instructions) if ins.opname == "IMPORT_NAME"]


def _import_at(instructions: list[dis.Instruction], n: int) -> _Import:
    # The compiler pushes level and fromlist right before IMPORT_NAME; after
    # it, each IMPORT_FROM pushes an attribute of the value on top, each store
    # pops a value into a local, SWAP and POP_TOP drop what ``import a.b.c as
    # d`` passes by. A stack of attribute paths from the module follows them.
    name, pushed = instructions[n].argval, instructions[max(n - 2, 0):n]
    if len(pushed) != 2 or any(i.opname not in _LOAD_CONSTANT for i in pushed):
        return _Import(name, 0, None, (), "a level or fromlist that is not a constant")
    level, fromlist = (i.argval for i in pushed)
    stack: list[tuple[str, ...]] = [()]
    bindings = []
    for follower in instructions[n + 1:]:
        if follower.opname == "IMPORT_FROM":
            stack.append((*stack[-1], follower.argval))
        elif follower.opname in _STORE_LOCAL:
            bindings.append((follower.argval, stack.pop()))
        elif follower.opname == "SWAP" and follower.arg == 2 and len(stack) >= 2:
            stack[-2:] = stack[-1], stack[-2]
        elif follower.opname == "POP_TOP":
            stack.pop()
        else:
            return _Import(name, level, fromlist, tuple(bindings), f"{follower.opname} {follower.argval}")
        if not stack:
            return _Import(name, level, fromlist, tuple(bindings))
    return _Import(name, level, fromlist, tuple(bindings), "the end of the code")


def _builtin_names(fn: types.FunctionType) -> dict[str, Any]:
    builtin_names = fn.__globals__.get("__builtins__", builtins)
    return vars(builtin_names) if isinstance(builtin_names, types.ModuleType) else builtin_names


class _Describer:
    def __init__(self) -> None:
        self._seen: dict[int, int] = {}  # id of a value being or already described -> its number
        self._alive: list[Any] = []  # keeps those values (and so their ids) alive
        self._path: list[str] = []

    # -- bookkeeping --

    @contextlib.contextmanager
    def _at(self, step: str) -> Iterator[None]:
        self._path.append(step)
        try:
            yield
        finally:
            self._path.pop()

    def _refuse(self, what: str) -> Undescribable:
        where = " > ".join(self._path)
        return Undescribable(f"{where}: {what}" if where else what)

    def _once(self, value: Any, build: Any) -> tuple:
        """``build()``, or a back reference if ``value`` is already being
        described (a cycle) or was described before (sharing)."""
        number = self._seen.get(id(value))
        if number is not None:
            return ("same as", number)
        self._seen[id(value)] = len(self._seen)
        self._alive.append(value)
        return build()

    # -- values --

    def value(self, value: Any) -> tuple:
        cls = type(value)
        if cls in PLAIN:
            return (cls.__name__, repr(value))
        if value is Ellipsis:
            return ("Ellipsis",)
        if isinstance(value, TORCH_VALUES) or cls is torch.Size:
            return ("torch value", constant_identity(value))
        if tracked_types.find(value) is not None:
            identity = constant_identity(value)
            if identity is None:
                raise self._refuse(f"a {cls.__qualname__} with no stable identity (a user placement?)")
            return ("distributed", identity)
        if isinstance(value, C.caches.OP_TYPES):
            return ("op", C.caches.op_name(value))
        if isinstance(value, enum.Enum):
            return ("enum", self.value(cls), value.name)
        if cls is tuple:  # immutable: never part of a cycle by itself
            return ("tuple", *self._items(value))
        if cls is frozenset:
            return ("frozenset", *sorted(self._items(value), key=repr))
        if cls is list:
            return self._once(value, lambda: ("list", *self._items(value)))
        if cls is set:
            return self._once(value, lambda: ("set", *sorted(self._items(value), key=repr)))
        if cls is dict:
            return self._once(value, lambda: ("dict", *self._pairs(value)))
        if cls is functools.partial:
            return self._once(value, lambda: self._partial(value))
        if cls is types.MethodType:
            return self._once(value, lambda: self._method(value))
        if cls is types.FunctionType:
            if _qualified_name(value) in _PURE_TORCH_FUNCTIONS and _importable_as_itself(value):
                return ("torch function", _qualified_name(value))
            return self._once(value, lambda: self._function(value))
        if cls is types.BuiltinFunctionType:
            return self._builtin(value)
        if isinstance(value, type):
            return self._once(value, lambda: self.cls(value))
        if dataclasses.is_dataclass(cls):
            return self._once(value, lambda: self._dataclass_instance(value))
        if cls is types.ModuleType:
            raise self._refuse(f"the module {value.__name__} used as a value (only attributes read from it "
                               "can be described)")
        raise self._refuse(f"a {_qualified_name(cls)} object, which has no description")

    def _items(self, values: Any) -> list[tuple]:
        out = []
        for n, item in enumerate(values):
            with self._at(f"item {n}"):
                out.append(self.value(item))
        return out

    def _pairs(self, mapping: dict) -> list[tuple]:
        out = []
        for key, item in mapping.items():
            with self._at(f"[{key!r}]"):
                out.append((self.value(key), self.value(item)))
        return out

    def _partial(self, p: functools.partial) -> tuple:
        with self._at("partial"):
            return ("partial", self.value(p.func), self.value(p.args), self.value(p.keywords))

    def _method(self, m: types.MethodType) -> tuple:
        with self._at(f"method {m.__func__.__qualname__}"):
            return ("method", self.value(m.__self__), self.value(m.__func__))

    def _builtin(self, fn: Any) -> tuple:
        module = getattr(fn, "__module__", None)
        if module == "builtins" and fn.__name__ in _PURE_BUILTINS and getattr(builtins, fn.__name__) is fn:
            return ("builtin", fn.__name__)
        if module in _PURE_BUILTIN_MODULES and _importable_as_itself(fn):
            return ("builtin", module, fn.__qualname__)
        raise self._refuse(f"calls the compiled function {_qualified_name(fn)}, which may read state a key "
                           "does not hold")

    # -- classes and instances --

    def cls(self, cls: type) -> tuple:
        if cls.__module__ == "builtins" and getattr(builtins, cls.__name__, None) is cls:
            return ("class", "builtins", cls.__name__)
        if _is_torch(cls) and _importable_as_itself(cls):
            return ("class", cls.__module__, cls.__qualname__)
        if issubclass(cls, enum.Enum):
            with self._at(f"enum {cls.__qualname__}"):
                members = tuple((name, self.value(m.value)) for name, m in cls.__members__.items())
                return ("enum class", _qualified_name(cls), members, self._class_body(cls, skip=set(cls.__members__)))
        if dataclasses.is_dataclass(cls):
            with self._at(f"dataclass {cls.__qualname__}"):
                params = getattr(cls, "__dataclass_params__")
                return ("dataclass", _qualified_name(cls), tuple(getattr(params, p) for p in _DATACLASS_PARAMS),
                        tuple(f.name for f in dataclasses.fields(cls)),
                        tuple(self.value(base) for base in cls.__bases__), self._class_body(cls))
        raise self._refuse(f"the class {_qualified_name(cls)} (only dataclasses, enums and the classes of torch "
                           "and builtins are described)")

    def _class_body(self, cls: type, skip: set[str] = frozenset()) -> tuple:
        out = []
        for name, attr in cls.__dict__.items():
            if name in _CLASS_BOOKKEEPING or name in skip or isinstance(attr, types.MemberDescriptorType):
                continue
            if issubclass(cls, enum.Enum) and name.startswith("_") and not name.startswith("__"):
                continue  # the enum machinery's own tables
            if name == "__hash__" and attr is None:
                continue
            if isinstance(attr, (staticmethod, classmethod)):
                attr = attr.__func__
            if name in _DATACLASS_GENERATED and _generated_by_dataclasses(attr):
                continue
            with self._at(f"{cls.__qualname__}.{name}"):
                if isinstance(attr, property):
                    out.append((name, "property", *(self.value(f) for f in (attr.fget, attr.fset, attr.fdel))))
                else:
                    out.append((name, self.value(attr)))
        return tuple(out)

    def _dataclass_instance(self, obj: Any) -> tuple:
        with self._at(f"a {type(obj).__qualname__}"):
            state = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
            state.update(getattr(obj, "__dict__", {}))
            return ("instance", self.value(type(obj)), tuple(self._pairs(state)))

    # -- functions --

    def _function(self, fn: types.FunctionType) -> tuple:
        with self._at(f"function {fn.__qualname__}"):
            code = self._code(fn.__code__)
            with self._at("defaults"):
                defaults = (self.value(fn.__defaults__), self.value(fn.__kwdefaults__))
            closure = []
            for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
                with self._at(f"closure variable {name}"):
                    try:
                        contents = cell.cell_contents
                    except ValueError:
                        raise self._refuse("not assigned yet") from None
                    closure.append((name, self.value(contents)))
            with self._at("attributes"):
                attributes = self._pairs(fn.__dict__)
            return ("function", code, defaults, tuple(closure), self._globals(fn), self._imports(fn),
                    tuple(attributes))

    def _code(self, code: types.CodeType) -> tuple:
        consts = []
        for const in code.co_consts:
            consts.append(self._code(const) if isinstance(const, types.CodeType) else self.value(const))
        return ("code", code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount, code.co_flags,
                code.co_code.hex(), getattr(code, "co_exceptiontable", b"").hex(), code.co_names,
                code.co_varnames, code.co_freevars, code.co_cellvars, tuple(consts))

    def _globals(self, fn: types.FunctionType) -> tuple:
        namespace, builtin_names = fn.__globals__, _builtin_names(fn)
        out = []
        for name, paths in sorted(_reads(fn.__code__, _LOAD_GLOBAL).items()):
            with self._at(f"global {name}"):
                if name in namespace:
                    out.append((name, self._global(namespace[name], paths)))
                elif name in builtin_names:
                    out.append((name, "builtin", self.value(builtin_names[name])))
                else:
                    out.append((name, "undefined"))  # a NameError where it is read, in every process
        return tuple(out)

    def _global(self, value: Any, paths: set[tuple[str, ...]]) -> tuple:
        if not isinstance(value, types.ModuleType):
            return self.value(value)
        if () in paths:
            raise self._refuse(f"the module {value.__name__} used as a value (only attributes read from it "
                               "can be described)")
        out = []
        for path in sorted(paths):
            with self._at(".".join((value.__name__, *path))):
                out.append((path, self._attribute_path(value, path)))
        return ("module", tuple(out))

    def _imports(self, fn: types.FunctionType) -> tuple:
        """The import statements in ``fn``'s code: what each binds, like the
        globals the code reads (a module imported at module level would be one)."""
        statements = _import_statements(fn.__code__)
        if not statements:
            return ()
        hook = _builtin_names(fn).get("__import__")
        if not (isinstance(hook, types.BuiltinFunctionType) and hook.__self__ is builtins):
            raise self._refuse(f"imports with __import__ replaced by {_qualified_name(hook)}: what an import "
                               "returns may not be the module this process holds")
        reads = _local_reads(fn.__code__)
        out = []
        for statement in statements:
            with self._at(str(statement)):
                out.append(self._import(statement, fn.__globals__, reads))
        return tuple(out)

    def _import(self, statement: _Import, namespace: dict, reads: dict[str, set[tuple[str, ...]]]) -> tuple:
        if statement.unfollowed:
            raise self._refuse(f"the imported value goes where it cannot be followed ({statement.unfollowed}): "
                               "import it at module level")
        name = self._imported_name(statement, namespace)
        # ``__import__`` returns the top-level package unless given a fromlist.
        module = sys.modules[name if statement.fromlist is not None else name.partition(".")[0]]
        out = []
        for local, attributes in statement.bindings:
            value = module
            for attribute in attributes:
                value = self._import_from(value, attribute)
            out.append((local, attributes, self._bound(value, local, reads.get(local, set()))))
        return ("import", name, tuple(out))

    def _imported_name(self, statement: _Import, namespace: dict) -> str:
        """The module's absolute name, checked imported (with each package on
        its way): importing it here would run its code, at the wrong time."""
        name = statement.name
        if statement.level:
            try:
                name = importlib.util.resolve_name("." * statement.level + name, namespace.get("__package__"))
            except (ImportError, ValueError) as e:
                raise self._refuse(f"a relative import its module cannot resolve ({e}): import it at module "
                                   "level") from None
        parts = name.split(".")
        for k in range(1, len(parts) + 1):
            if sys.modules.get(".".join(parts[:k])) is None:  # (None: imports of it are blocked)
                raise self._refuse(f"imports {'.'.join(parts[:k])}, which is not imported in this process yet "
                                   "(describing it would run its code): import it at module level")
        return name

    def _import_from(self, value: Any, attribute: str) -> Any:
        # IMPORT_FROM falls back on the submodule of that name: one imported
        # but not bound to its package yet; one not imported yet it imports.
        if hasattr(value, attribute):
            return getattr(value, attribute)
        submodule = f"{getattr(value, '__name__', '?')}.{attribute}"
        if submodule not in sys.modules:
            raise self._refuse(f"imports {submodule}, which is not imported in this process yet (describing it "
                               "would run its code): import it at module level")
        return sys.modules[submodule]

    def _bound(self, value: Any, local: str, paths: set[tuple[str, ...]]) -> tuple:
        """What the import stores in ``local``: described as a global of that
        name would be, by the attribute paths read from it if a module."""
        if isinstance(value, types.ModuleType) and () in paths:
            raise self._refuse(f"the module {value.__name__}, stored in the local {local}, used as a value (only "
                               f"attributes read from it can be described): read attributes from {local} only, "
                               f"or import them (from {value.__name__} import ...)")
        with self._at(f"local {local}"):
            return self._global(value, paths)

    def _attribute_path(self, module: types.ModuleType, path: tuple[str, ...]) -> tuple:
        found: Any = module
        for step, name in enumerate(path):
            if not hasattr(found, name):
                return ("no attribute", path[: step + 1])  # an AttributeError where it is read
            found = getattr(found, name)
            if not isinstance(found, types.ModuleType):
                rest = path[step + 1:]
                if rest and not (isinstance(found, type) and _is_torch(found)):
                    return self._attribute_path_of_value(found, rest)
                return self.value(found)
        raise self._refuse(f"the module {found.__name__} used as a value (only attributes read from it "
                           "can be described)")

    def _attribute_path_of_value(self, found: Any, rest: tuple[str, ...]) -> tuple:
        # ``torch.ops.aten.mm.default``: the namespaces in between have no
        # description; the value at the end of the path is what the code uses.
        for name in rest:
            if not hasattr(found, name):
                return ("no attribute", rest)
            found = getattr(found, name)
        return self.value(found)
