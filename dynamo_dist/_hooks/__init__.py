"""The one place that changes torch's global state, always reversibly.

- ``patches.py``: ``Patches``, the record every change goes through (the
  original is remembered the first time a target is touched; ``restore()``
  puts every original back).
- ``core.py``: what ``install()`` changes (Dynamo's tracker builders,
  builtins, identity, the DTensor spec guard, the AOTAutograd fixes) and
  ``uninstall()`` restores;
- ``caches.py``: what ``install()`` changes in the compile caches (the keys
  of ``caching/``);
- ``tools.py``: the tools' temporary changes (``explain``'s recording,
  logger levels, configs, the CLI's rendezvous, the redistribute planner's
  switches), each a ``Patches`` its caller restores.
"""

from .core import apply, is_active, remove
from .patches import Patches
from .tools import (
    compile_patches,
    config_patches,
    end_recording,
    planner_patches,
    planner_timer,
    plugin_state,
    set_plugin_state,
    trace_patches,
    recording_patches,
    rendezvous_patches,
)

__all__ = [
    "Patches", "apply", "remove", "is_active", "plugin_state", "set_plugin_state", "recording_patches", "end_recording",
    "compile_patches", "config_patches", "rendezvous_patches", "trace_patches", "planner_patches",
    "planner_timer",
]
