"""Runtime helpers called from the bytecode Dynamo emits when a tracked
object escapes the compiled region. They run in the user's process, outside
any graph, so they only touch real objects."""

from __future__ import annotations

from typing import Any

import torch._dynamo


# Run as plain Python: Dynamo must not compile the torch.distributed frames a
# replay calls (DeviceMesh.get_group ...) as frames of their own.
@torch._dynamo.disable
def apply_steps(obj: Any, steps: tuple) -> Any:
    """Replay ``steps`` on ``obj``: ("attr", name) | ("call", name, args, kwargs)
    | ("item", key). Used to rebuild a submesh or group from its parent."""
    for step in steps:
        if step[0] == "attr":
            obj = getattr(obj, step[1])
        elif step[0] == "call":
            obj = getattr(obj, step[1])(*step[2], **dict(step[3]))
        else:
            obj = obj[step[1]]
    return obj
