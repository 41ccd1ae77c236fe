"""A DC server's side of the replica audit (docs/recovery-audit.md): every ``audit_every``
rounds a digest of each key's value, and the optimizer's update count of the key, for the
scheduler to compare across DCs.

A key is digested right after it applied a round at which every DC holds the same value:

- ``fsa`` and ``esync``: every round (round ``r`` is audited when ``r % every == 0``);
- ``hfa`` and ``diloco``: a round that crossed the WAN, when its WAN round is a multiple of
  ``every`` (between WAN rounds a DC's replica moves by its own workers' deltas);
- ``mixed``: never. Each DC applies the others' updates as they arrive, delay-compensated
  against its own weights, so its replica legitimately differs from every other at any
  round boundary: there is nothing to compare.

The digest is SHA-256 over the value's raw bytes (:func:`checkpoint.digest`, the one a
replica copy is checked by; with the CPU's SHA extensions it hashes ~1.6 GB/s, faster than
BLAKE2b here). The hashing runs off the server's loop, on one thread of its own: the store
never writes into a value it holds (each round replaces the array), so a reference to it is
a snapshot, and ``hashlib`` releases the GIL while it hashes. The loop pays O(1) per key
and audited round (the submission and the update count); :meth:`ReplicaDigests.take`
collects the finished digests for the next heartbeat, at most :data:`MAX_ROWS` a beat, the
rest the beats after. If the hashing falls far behind (more than :data:`MAX_PENDING`
digests waiting), the oldest are left out and counted (``skipped``): the scheduler compares
the DCs that reported a round, so a round left out is audited less, never wrongly.
"""
from __future__ import annotations

import collections
from concurrent.futures import Future, ThreadPoolExecutor

from ..core.kinds import AUDIT_ROWS
from ..model.checkpoint import digest

__all__ = ["MAX_PENDING", "MAX_ROWS", "NO_COUNT", "InlineHashing", "ReplicaDigests"]

MAX_ROWS = AUDIT_ROWS    # digests a heartbeat carries at most (~45 KB of JSON)
MAX_PENDING = 8192      # digests waiting (being hashed or for a beat) before the oldest go
NO_COUNT = -1           # the update count of a key no server optimizer updates


class InlineHashing:
    """An executor that runs what it is given at once, on the caller's thread (tests, and
    a server that wants no thread)."""

    def submit(self, fn, *args) -> Future:
        future = Future()
        future.set_result(fn(*args))
        return future

    def shutdown(self, wait: bool = True) -> None:
        pass


class ReplicaDigests:
    """Told of every round a key applied (:meth:`applied`); hands out ``[key, round,
    digest, updates]`` rows of the audited ones (:meth:`take`)."""

    def __init__(self, every: int, sync, hashing=None):
        """``every``: ``[recovery] audit_every`` (0: off); ``sync``: the cluster's
        :class:`~netstorm.geoserver.config.sync.SyncConfig`; ``hashing``: an executor
        (default: one thread of its own, started at the first audited round)."""
        self.every = 0 if sync.asynchronous else int(every)
        self.sync = sync
        self._hashing = hashing
        self._pending: collections.deque = collections.deque()  # (key, round, Future, n)
        self.skipped = 0        # digests left out because hashing fell behind
        self.sent = 0           # rows handed to heartbeats

    @property
    def on(self) -> bool:
        return self.every > 0

    def due(self, rnd: int) -> bool:
        """Whether a key's replica after its round ``rnd`` (a DC round) is audited. O(1)."""
        if not self.on or rnd <= 0 or not self.sync.crosses_wan(rnd):
            return False
        return self.sync.wan_round(rnd) % self.every == 0

    def applied(self, entry, optimizer) -> None:
        """``entry`` (a :class:`~.store_keys.KeyEntry`) just applied its round
        ``entry.applied``; ``optimizer``: the store's (None: none on the servers). O(1) on
        the caller's thread; the hash, O(key bytes), on the hashing thread."""
        rnd = entry.applied
        if entry.value is None or not self.due(rnd):
            return
        updates = NO_COUNT
        if optimizer is not None and self.sync.mode == "fsa":
            updates = int(optimizer.key_states([entry.key])[1].get(entry.key, 0))
        if self._hashing is None:
            self._hashing = ThreadPoolExecutor(max_workers=1,
                                               thread_name_prefix="replica-digest")
        self._pending.append((entry.key, rnd, self._hashing.submit(digest, entry.value),
                              updates))
        while len(self._pending) > MAX_PENDING:
            self._pending.popleft()
            self.skipped += 1

    def take(self, limit: int = MAX_ROWS) -> list:
        """The finished digests, oldest first, at most ``limit``: ``[[key, round, digest,
        updates]]`` (``updates``: the optimizer's update count of the key, or
        :data:`NO_COUNT`). Never waits for a hash. O(rows)."""
        rows = []
        while self._pending and len(rows) < limit and self._pending[0][2].done():
            key, rnd, future, updates = self._pending.popleft()
            rows.append([key, rnd, future.result(), updates])
        self.sent += len(rows)
        return rows

    def close(self, wait: bool = False) -> None:
        """Stop the hashing thread (what it hashes then is not sent); ``wait``: until the
        hashes under way are done."""
        if self._hashing is not None:
            self._hashing.shutdown(wait=wait)
