"""The one boundary between dynamo_dist and torch's internals.

Only this package imports torch's private modules or reads private
attributes of torch objects (``tests/unit/test_structure.py`` checks it). It is
split by job, and call sites name the job (``C.dynamo.install_guard``,
``C.distributed.mesh_dim_group_names``): nothing is re-exported flat:

- ``dynamo``: Dynamo's tracer, trackers, codegen and guards as small named
  functions;
- ``slots``: tracker behaviours under our names, bound to this release's
  slot names in one table (``Tracker``);
- ``stock``: stock Dynamo's tracker builders, bypassing our hooks;
- ``distributed``: private facts of meshes, DTensors and placements;
- ``observe``: what diagnostics read (logs, metrics, compile hooks);
- ``caches``: the compile caches (keys, lookups, artifacts) and the job's store;
- ``packages``: Dynamo's packages (torch's precompile), made and installed for compile once;
- ``aot``: AOTAutograd's partitioner, as the RNG-state fix needs it;
- ``collective``: the ``AsyncCollectiveTensor`` backport (only where torch lacks the fix);
- ``c10d``: torch.distributed's calls as functional collectives (their traced
  forms) and the facts of c10d their trackers need;
- ``dynamo_logs``: what Dynamo's logs say, read back;
- ``release``: which torch this is, and whether ``install()`` accepts it.

Supported torch: ``>=2.11,<2.16`` (``SUPPORTED_RANGE``), three slot families
(``slots.FAMILY``, chosen by feature detection, never by the version string,
which only gates ``install()``):
- dunder (2.11, 2.12): few slot methods; comparison, ``str``, ``repr`` arrive
  as dunder calls on the tracker, dict keys through ``is_python_hashable``;
  2.11 tracks meshes and placements with in-tree trackers, 2.12 as opaque objects;
- slot-style (2.13): ``richcompare_impl``, ``str_impl``, ``var_getattr``,
  ``is_python_equal``...; ``compile_on_one_rank`` lives in
  ``torch.distributed.config``; DeviceMesh's ``__eq__`` compares 5 fields;
- CPython-style (2.14, 2.15): ``tp_richcompare_impl``, ``tp_getattro_impl``...
  (``is_python_equal`` gone); the canonical ``compile_on_one_rank`` is
  ``torch.compiler.config``'s; 2.15's ``DeviceMesh.__eq__`` adds
  ``_preserve_rank_order``.
"""

from __future__ import annotations

from . import aot, c10d, caches, collective, distributed, dynamo, packages, release, slots, spmd, stock  # noqa: F401
