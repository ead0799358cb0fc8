"""What a command needs before it starts, checked up front so that a missing
or unsupported dependency ends in one line naming the fix, not a traceback
from deep inside torch.

A command module may declare ``NEEDS = {"module": "extra"}``: the optional
packages it imports and the pip extra that brings each one; and
``NEEDS_TORCH = False`` when it runs without torch.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from types import ModuleType

DISTRIBUTION = "dynamo-dist"


def torch_requirement() -> str:
    """The torch requirement this package declares (``torch<2.16,>=2.11``)."""
    try:
        requires = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:  # run from a source tree, not installed
        requires = []
    return next((r.split(";")[0].replace(" ", "") for r in requires if r.startswith("torch")), "torch")


def missing_extra(command: ModuleType) -> str | None:
    for module, extra in getattr(command, "NEEDS", {}).items():
        if importlib.util.find_spec(module) is None:
            return f"needs {module}, an optional dependency: pip install '{DISTRIBUTION}[{extra}]'"
    return None


def torch_problem() -> str | None:
    """None when this torch can run the plugin, else one line saying why not
    and what to install."""
    try:
        import torch
    except ImportError:
        return f"needs torch, which is not installed: pip install '{torch_requirement()}'"
    from dynamo_dist import _supported

    if not _supported.version_supported():  # from the version string, before torch's internals load
        return " ".join(str(_supported.unsupported()).split())
    try:
        from dynamo_dist import _compat as C
    except (ImportError, AttributeError) as e:  # a torch too old or too new can fail here already
        first = str(e).splitlines()[0] if str(e) else ""
        return (f"cannot load on torch {torch.__version__} ({type(e).__name__}: {first}); "
                f"pip install '{torch_requirement()}'")
    try:
        C.release.check_supported()
    except RuntimeError as e:
        return " ".join(str(e).split())
    return None


def problem(command: ModuleType) -> str | None:
    """The first thing ``command`` lacks, as one line, or None."""
    return missing_extra(command) or (torch_problem() if getattr(command, "NEEDS_TORCH", True) else None)
