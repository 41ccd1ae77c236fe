"""geoserver/server/replica_digest.py: a DC server's digests of its replica."""
import hashlib
import threading

import numpy as np

from netstorm.geoserver.config.sync import SyncConfig
from netstorm.geoserver.server import replica_digest
from netstorm.geoserver.server.replica_digest import InlineHashing, ReplicaDigests
from netstorm.geoserver.server.store_keys import KeyEntry


class FakeOptimizer:
    def __init__(self, counts):
        self.counts = counts

    def key_states(self, keys):
        return {}, {k: self.counts[k] for k in keys if k in self.counts}, 0


def applied(digests, key, rnd, value, optimizer=None):
    entry = KeyEntry(key, value.dtype, value.shape, value=value, applied=rnd)
    digests.applied(entry, optimizer)


def test_fsa_digests_every_nth_round_with_the_update_count():
    digests = ReplicaDigests(5, SyncConfig(), InlineHashing())
    value = np.arange(6, dtype=np.float32)
    for rnd in range(1, 11):
        applied(digests, 0, rnd, value, FakeOptimizer({0: rnd}))
    want = hashlib.sha256(value.tobytes()).hexdigest()
    assert digests.take() == [[0, 5, want, 5], [0, 10, want, 10]]
    assert digests.take() == [] and digests.sent == 2


def test_without_a_server_optimizer_there_is_no_count():
    digests = ReplicaDigests(1, SyncConfig(), InlineHashing())
    applied(digests, 3, 1, np.ones(2, np.float64))
    assert digests.take()[0][3] == replica_digest.NO_COUNT


def test_hfa_digests_only_rounds_that_crossed_the_wan():
    digests = ReplicaDigests(2, SyncConfig(mode="hfa", k1=1, k2=3), InlineHashing())
    assert [r for r in range(1, 19) if digests.due(r)] == [6, 12, 18]   # WAN rounds 2, 4, 6


def test_mixed_and_zero_are_off():
    assert not ReplicaDigests(10, SyncConfig(mode="mixed")).on
    assert not ReplicaDigests(0, SyncConfig()).on
    assert not ReplicaDigests(0, SyncConfig()).due(10)


def test_hashing_runs_off_the_callers_thread_and_take_never_waits(monkeypatch):
    """The default executor hashes on its own thread; a digest not finished stays for a
    later beat, in order."""
    gate, hashed = threading.Event(), threading.Event()
    threads = []

    def slow(value):
        threads.append(threading.current_thread().name)
        gate.wait(30)
        return "d" * 64

    monkeypatch.setattr(replica_digest, "digest", slow)
    digests = ReplicaDigests(1, SyncConfig())
    try:
        applied(digests, 0, 1, np.ones(3, np.float32))
        assert digests.take() == []
        digests._pending[0][2].add_done_callback(lambda _: hashed.set())
        gate.set()
        assert hashed.wait(30)
        assert digests.take() == [[0, 1, "d" * 64, -1]]
        assert threads and threads[0] != threading.current_thread().name
    finally:
        gate.set()
        digests.close()


def test_a_backlog_drops_the_oldest_and_counts_them(monkeypatch):
    monkeypatch.setattr(replica_digest, "MAX_PENDING", 3)
    digests = ReplicaDigests(1, SyncConfig(), InlineHashing())
    for rnd in range(1, 6):
        applied(digests, 0, rnd, np.ones(1, np.float32))
    assert [row[1] for row in digests.take(limit=2)] == [3, 4]
    assert digests.skipped == 2 and [row[1] for row in digests.take()] == [5]
