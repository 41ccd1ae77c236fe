"""Property test of one iteration's data path without sockets: every DC's KeyStore and
TreeExchange wired together, messages delivered in random order, a random policy (random
spanning trees, random shares) switched in at every round. Every worker must get the exact
sum, every round, and every DC bit-identical bytes."""
import random

import numpy as np
import pytest

from fakes import exchanges, init_message, push_message, random_policy
from netstorm.geoserver.server.local_store import KeyStore
from netstorm.geoserver.policy.tree import Policy, Tree
from netstorm.geoserver.config.sync import SyncConfig
from netstorm.geoserver.core.wire import Kind

pytestmark = pytest.mark.usefixtures("dataplane")   # both data paths (conftest.py)


class World:
    """D DCs with W workers each; a single queue of in-flight messages, delivered randomly."""

    def __init__(self, rng, dcs, workers_per_dc, policies, chunk_bytes, sync=SyncConfig()):
        self.rng, self.queue, self.values = rng, [], {}
        self.workers = {dc: [f"{dc}/w{i}" for i in range(workers_per_dc)] for dc in dcs}
        ids = {w: n for n, w in enumerate(w for ws in self.workers.values() for w in ws)}
        self.worker_of_id = {v: k for k, v in ids.items()}
        self.ids = ids
        self.stores = {}
        self.exchanges = exchanges(
            dcs, policies,
            lambda dc: lambda target, kind, cid, arr, encoded=False: self.queue.append(
                ("wan", dc, target, kind, cid, np.array(arr), encoded)),
            lambda dc: lambda *total: self.stores[dc].deliver(*total))
        for dc in dcs:
            ex = self.exchanges[dc]
            self.stores[dc] = KeyStore(
                dc, [ids[w] for w in self.workers[dc]], chunk_bytes, ex.policies,
                reply=lambda w, m: self.queue.append(("reply", w, m)),
                contribute=ex.contribute, forward_init=lambda *a: None, sync=sync,
                all_workers=len(ids))

    def init(self, key, value):
        for dc, workers in self.workers.items():
            for w in workers:
                self.stores[dc].on_init(init_message(self.ids[w], key, value))

    def push(self, dc, worker, key, rnd, array):
        self.queue.append(("push", dc, push_message(self.ids[worker], key, rnd, array,
                                                    request=rnd)))

    def run(self, until=lambda: False):
        """Deliver in random order until the queue is empty or ``until()`` holds."""
        while self.queue and not until():
            item = self.queue.pop(self.rng.randrange(len(self.queue)))
            if item[0] == "push":
                self.stores[item[1]].on_push(item[2])
            elif item[0] == "wan":
                _, source, target, kind, cid, arr, encoded = item
                self.exchanges[target].on_chunk(source, kind, cid, arr, encoded)
            elif item[2].kind == Kind.VALUE:
                (value,) = item[2].arrays()
                self.values[(self.worker_of_id[item[1]], item[2].key, item[2].seq)] = \
                    np.array(value)


@pytest.mark.parametrize("seed", range(12))
def test_random_policies_switched_every_round_give_exact_sums(seed):
    """Shared and split trees mixed (odd seeds), a new policy every round."""
    rng = random.Random(seed)
    nprng = np.random.RandomState(seed)
    dcs = [f"dc{i}" for i in range(rng.randint(2, 6))]
    rounds = 4
    policies = [random_policy(dcs, rng, max_trees=4, version=r + 1, start_round=r + 1,
                              split=seed % 2 == 1) for r in range(rounds)]
    world = World(rng, dcs, rng.randint(1, 3), policies, chunk_bytes=rng.choice([64, 256]))
    sizes = {key: rng.choice([1, 7, 40, 300, 1000]) for key in range(4)}
    for key, size in sizes.items():
        world.init(key, np.zeros(size, np.float32))
    world.queue = [q for q in world.queue if q[0] != "reply"]
    expected = {}
    for rnd in range(1, rounds + 1):
        for key, size in sizes.items():
            total = np.zeros(size, np.float32)
            for dc, workers in world.workers.items():
                for w in workers:
                    a = nprng.randint(-9, 9, size).astype(np.float32)
                    total += a
                    world.push(dc, w, key, rnd, a)
            expected[(key, rnd)] = total
        world.run()                       # rounds may also overlap: run after all pushes
    for (worker, key, rnd), got in world.values.items():
        assert np.array_equal(got, expected[(key, rnd)]), (worker, key, rnd)
    n_workers = sum(len(w) for w in world.workers.values())
    assert len(world.values) == n_workers * len(sizes) * rounds, "a reply is missing"
    assert all(ex.in_flight == 0 for ex in world.exchanges.values())


def test_each_round_uses_the_layout_of_its_own_policy():
    dcs = ["a", "b"]
    p1 = Policy(1, 1, (Tree("a", {"a": None, "b": "a"}),))
    p2 = Policy(2, 2, (Tree("a", {"a": None, "b": "a"}), Tree("b", {"a": "b", "b": None})),
                (0.5, 0.5))
    world = World(random.Random(0), dcs, 1, [p1, p2], chunk_bytes=64)
    world.init(0, np.zeros(100, np.float32))
    sent = []

    class Recording(list):          # the chunks b sends (each entry: "wan", dc, ..., cid, ...)
        def append(self, item):
            if item[0] == "wan" and item[1] == "b":
                sent.append(item[4])
            super().append(item)
    world.queue = Recording(world.queue)
    for rnd in (1, 2):
        for dc in dcs:
            world.push(dc, f"{dc}/w0", 0, rnd, np.ones(100, np.float32))
        world.run()
    versions = {(c.rnd, c.version, c.tree) for c in sent}
    assert {v for r, v, _ in versions if r == 1} == {1}
    assert {(v, t) for r, v, t in versions if r == 2} >= {(2, 1)}    # round 2 uses both trees


@pytest.mark.parametrize("seed", range(8))
def test_diloco_fragments_each_apply_every_pseudo_gradient_once_per_outer_round(seed):
    """Streaming diloco's traffic: keys in 2 fragments whose rounds overlap (fragment 1's
    round r travels with fragment 0's round r + 1), random message orders, a new random
    policy every round. Every worker of every DC gets, for each key and round, the outer
    Nesterov step of the average pseudo-gradient of exactly that round, applied once, in
    order (checked against a plain numpy reference), and all of them the same bits."""
    rng, nprng = random.Random(seed), np.random.RandomState(seed)
    dcs = [f"dc{i}" for i in range(rng.randint(2, 5))]
    rounds, lr, momentum = 4, 0.7, 0.9
    policies = [random_policy(dcs, rng, max_trees=3, version=r + 1, start_round=r + 1,
                              split=seed % 2 == 1) for r in range(rounds + 1)]
    sync = SyncConfig(mode="diloco", h=4, fragments=2, outer_lr=lr, outer_momentum=momentum)
    world = World(rng, dcs, rng.randint(1, 3), policies, rng.choice([64, 256]), sync)
    sizes = {key: rng.choice([1, 7, 40, 300]) for key in range(4)}
    fragment = {key: key % 2 for key in sizes}
    weights = {key: nprng.randn(size).astype(np.float32) for key, size in sizes.items()}
    for key in sizes:
        world.init(key, weights[key])
    world.run()
    world.queue = []
    n = len(world.ids)
    want, buffers = {}, {}

    def applied(key, rnd):
        return all(store.keys[key].applied >= rnd for store in world.stores.values())

    for phase in range(1, 2 * rounds + 2):
        for key in sizes:
            rnd = (phase + 1 - fragment[key]) // 2   # fragment 1 leaves one phase later
            if not 1 <= rnd <= rounds or (phase + 1 - fragment[key]) % 2:
                continue
            world.run(until=lambda: applied(key, rnd - 1))  # its previous round is back
            total = np.zeros(sizes[key], np.float32)
            for dc, workers in world.workers.items():
                for w in workers:
                    delta = nprng.randint(-9, 9, sizes[key]).astype(np.float32)
                    total += delta
                    world.push(dc, w, key, rnd, delta)
            grad = -(total / np.float32(n))
            buf = grad.copy() if key not in buffers else np.float32(momentum) * buffers[key] + grad
            buffers[key] = buf
            weights[key] = weights[key] - np.float32(lr) * (grad + np.float32(momentum) * buf)
            want[(key, rnd)] = weights[key]
        world.run(until=lambda: rng.random() < 0.3)   # part of the traffic, then more pushes
    world.run()
    assert len(world.values) == n * len(sizes) * rounds, "a reply is missing"
    for (worker, key, rnd), got in world.values.items():
        assert got.tobytes() == want[(key, rnd)].tobytes(), (worker, key, rnd)
    assert all(ex.in_flight == 0 for ex in world.exchanges.values())
