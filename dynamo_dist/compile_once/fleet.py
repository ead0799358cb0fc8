"""The fleet cache (torch's Redis remote compile cache) as compile once's
data plane.

Where a job runs with torch's remote caches on (``TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE=1``
or ``TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE=1``, a Redis server from
``TORCHINDUCTOR_REDIS_HOST`` / ``_PORT`` / ``_URL``), the compiling rank
puts what it would send (the bundle: artifacts and kernels) into that Redis
once, under its digest, and each host fetches it from there: the job's store
carries the claim, the beat and the "done" (bytes, not megabytes), and the
payload's readers are spread over what the fleet runs (replicas, a cluster
behind one address), never the one process that also serves torchrun's
rendezvous and NCCL's bootstrap.

The key is ``dynamo_dist:compile-once:<digest>``: it names the bytes, so a
reader is never handed another payload, and it expires after ``TTL_S`` (a
job's ranks read it within minutes; Redis' own eviction may take it sooner,
and a rank that finds it gone compiles itself). The ranks that waited delete
it once every one of them has it, as they delete a payload from the store.
"""

from __future__ import annotations

from typing import Any

from .. import _compat as C

PREFIX = "dynamo_dist:compile-once:"
TTL_S = 24 * 3600


class FleetError(RuntimeError):
    """The fleet cache failed or does not hold the payload; the caller
    compiles here (or, publishing, sends the payload through the store)."""


class Fleet:
    """The fleet cache's client (``C.caches.fleet_client()``)."""

    def __init__(self, client: Any, address: str) -> None:
        self.client, self.address = client, address

    def put(self, name: str, payload: bytes) -> None:
        try:
            self.client.set(PREFIX + name, payload, ex=TTL_S)
        except Exception as e:
            raise FleetError(f"the fleet cache at {self.address} refused the payload ({type(e).__name__}: {e})") from e

    def get(self, name: str) -> bytes:
        try:
            payload = self.client.get(PREFIX + name)
        except Exception as e:
            raise FleetError(f"the fleet cache at {self.address} failed ({type(e).__name__}: {e})") from e
        if payload is None:
            raise FleetError(f"the fleet cache at {self.address} no longer holds the payload (expired or evicted)")
        return bytes(payload)

    def delete(self, name: str) -> None:
        try:
            self.client.delete(PREFIX + name)
        except Exception:  # it expires on its own
            pass


def fleet() -> Fleet | None:
    """The fleet cache where torch's remote caches are on and its Redis
    answers, else None (payloads then travel through the job's store)."""
    found = C.caches.fleet_client()
    return None if found is None else Fleet(*found)
