"""Which Engine replica takes a request: a Ray Serve request router (``RequestRouter``) configured on the Engine
deployment, so every handle to it (the ingress's) routes this way.

The ingress puts a routing key in the request's ``multiplexed_model_id`` (Ray's per-request routing field; no
model is loaded by it):

- ``doc:<digest>``: a document. Its replicas are ranked by rendezvous hashing (highest hash of key and replica
  id first), one rank each: the first while it has room, else the next (``fallbacks`` of them), else wait and
  retry. While the set of replicas stays the same a document always lands on the same replica, so that
  replica's context and syntax caches keep hitting; when a replica is lost or added, only the documents whose
  first rank it was move. Every ingress replica computes the same ranking.
- ``replica:<id>``: that replica only (the ingress asks each replica for its statistics this way).
- empty: the less loaded of two random replicas (Ray's default policy).

Ray does the rest: probing queue lengths, skipping full replicas (``max_ongoing_requests``), queueing and
back-off, dropping dead replicas.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from typing import Any

from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica

from edit_engine.serve.ray_app import registry

DOC = "doc:"
PIN = "replica:"


def document_key(material: str) -> str:
    """The routing key of a document (a digest: uris and session ids stay out of Ray's request metadata)."""
    return DOC + hashlib.blake2b(material.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


def _score(key: str, replica: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{key}|{replica}".encode(), digest_size=8).digest(), "big")


def ranks(key: str, replicas: Sequence[str], fallbacks: int = 2, rng: random.Random | None = None) -> list[list[int]]:
    """Indices into ``replicas``, most preferred rank first (module doc)."""
    if key.startswith(PIN):
        return [[i] for i, r in enumerate(replicas) if r == key[len(PIN):]][:1]
    if key.startswith(DOC):
        order = sorted(range(len(replicas)), key=lambda i: _score(key, replicas[i]), reverse=True)
        return [[i] for i in order[: 1 + fallbacks]]
    if len(replicas) <= 2:
        return [list(range(len(replicas)))] if replicas else []
    return [(rng or random).sample(range(len(replicas)), 2)]


class DocumentAffinityRouter(RequestRouter):
    """Rendezvous hashing on the request's document key (module doc)."""

    def initialize_state(self, fallbacks: int = 2, **kwargs: Any) -> None:
        self._fallbacks = fallbacks

    def update_replicas(self, replicas: list[RunningReplica]) -> None:
        super().update_replicas(replicas)
        self._publish()

    def on_replica_actor_died(self, replica_id: Any) -> None:
        super().on_replica_actor_died(replica_id)
        self._publish()

    def _publish(self) -> None:
        registry.publish(self.app_name, (r.unique_id for r in self.curr_replicas))

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: PendingRequest | None = None) -> list[list[RunningReplica]]:
        key = ""
        if pending_request is not None:
            pending_request.routing_context.should_backoff = True  # back off between rounds, never spin
            key = pending_request.metadata.multiplexed_model_id or ""
        ids = [r.replica_id.unique_id for r in candidate_replicas]
        return [[candidate_replicas[i] for i in rank] for rank in ranks(key, ids, getattr(self, "_fallbacks", 2))]
