"""geoserver.wan_transport with aggregation, without sockets: chunks split over random relay
plans, messages encoded to frames and delivered in random order, a link stalling mid-round
with messages stuck in its buffers. Every DC must end with the exact sums, bit-identical."""

import random
import numpy as np
import pytest
from fakes import Clock, Net, exchanges, random_policy
from netstorm.geoserver.core import wire
from netstorm.geoserver.policy.chunking import ChunkId
from netstorm.geoserver.server.wan.transport import WanTransport, probe_pieces

pytestmark = pytest.mark.usefixtures("dataplane")   # both data paths (conftest.py)


class World:
    """One WanTransport and TreeExchange per DC over a :class:`fakes.Net`, whose buffered
    messages :meth:`step` delivers one at a time, from a random link."""

    def __init__(self, rng, n, policy, chunk_bytes):
        self.rng, self.clock, self.net = rng, Clock(), Net()
        self.dcs = [f"dc{i}" for i in range(n)]
        ids = {dc: i + 1 for i, dc in enumerate(self.dcs)}
        name_of = {v: k for k, v in ids.items()}
        rates = {(a, b): rng.uniform(10, 100) for a in self.dcs for b in self.dcs if a != b}
        self.totals, self.wan = {}, {}
        for dc in self.dcs:
            po = type("PO", (), {"van": self.net.van(dc, name_of),
                                 "connect": lambda self, node, send_hwm=0: None})()
            wan = WanTransport(dc, ids, po, rates, chunk_bytes, stall_s=1.0, clock=self.clock)
            wan.router.min_split_bytes = 0
            self.wan[dc] = wan
        self.ex = exchanges(self.dcs, [policy], lambda dc: self.wan[dc].send_chunk,
                            lambda dc: lambda key, chunk, rnd, total: self.totals.__setitem__(
                                (dc, key, chunk, rnd), np.array(total)))
        for dc in self.dcs:
            self.wan[dc].deliver_to(self.ex[dc].on_chunk)

    def random_plans(self):
        for dc in self.dcs:
            rows = []
            for v in self.dcs:
                others = [w for w in self.dcs if w not in (dc, v)]
                if v != dc and others and self.rng.random() < 0.7:
                    for w in self.rng.sample(others, min(len(others), self.rng.randint(1, 2))):
                        rows.append([dc, v, w, self.rng.uniform(0.05, 0.45)])
            self.wan[dc].on_routes({"relays": rows})

    def step(self):
        links = self.net.deliverable()
        if not links:
            return False
        src, dst = self.rng.choice(links)
        frames = self.net.buffers[(src, dst)].pop(0)
        self.wan[dst].on_message(src, wire.decode(frames))
        return True

    def flush_all(self):
        for wan in self.wan.values():
            wan.flush(wan.backlogged())


def contribute(world, nprng, chunks, size, rnd):
    expected = {}
    for c in range(chunks):
        tree = c % len(world.ex[world.dcs[0]].policies[1].trees)
        total = np.zeros(size, np.float32)
        for dc in world.dcs:
            a = nprng.randint(-50, 50, size).astype(np.float32)
            total += a
            world.ex[dc].contribute(ChunkId(0, c, rnd, 1, tree), a)
        expected[c] = total
    return expected


def check(world, expected, rnd):
    for c, total in expected.items():
        for dc in world.dcs:
            got = world.totals.get((dc, 0, c, rnd))
            assert got is not None, f"{dc} never got chunk {c}"
            assert np.array_equal(got, total), (dc, c)


@pytest.mark.parametrize("seed", range(10))
def test_random_relay_plans_give_exact_sums_everywhere(seed):
    rng, nprng = random.Random(seed), np.random.RandomState(seed)
    n = rng.randint(3, 6)
    world = World(rng, n, random_policy([f"dc{i}" for i in range(n)], rng, max_trees=3,
                                        split=seed % 2 == 1), chunk_bytes=1 << 16)
    world.random_plans()
    expected = contribute(world, nprng, chunks=6, size=rng.randint(1, 3000), rnd=1)
    while world.step():
        pass
    check(world, expected, 1)
    relayed = sum(1 for w in world.wan.values() if w.router.relays)
    assert relayed > 0
    assert all(w.reassembly.pending == 0 for w in world.wan.values())


def four_dcs_with_a_blocked_tree_link(seed):
    """4 DCs on 2 random trees; the link from some child to its parent in the first tree
    is blocked (takes two messages, delivers nothing). Returns (rng, nprng, world, child,
    parent)."""
    rng, nprng = random.Random(seed), np.random.RandomState(seed)
    policy = random_policy([f"dc{i}" for i in range(4)], rng, max_trees=2)
    world = World(rng, 4, policy, chunk_bytes=1 << 16)
    tree = policy.trees[0]
    child = next(dc for dc, p in tree.parent.items() if p is not None)
    world.net.blocked.add((child, tree.parent[child]))
    return rng, nprng, world, child, tree.parent[child]


@pytest.mark.parametrize("capacity", [2, 20])
@pytest.mark.parametrize("seed", range(6))
def test_a_link_stalling_mid_round_is_detoured_and_nothing_counts_twice(seed, capacity):
    """The blocked link swallowed ``capacity`` messages (in socket buffers and its queue):
    all of them go around it too, not only the last few handed over (20 is more than the
    8 a detour once re-sent), and arrive twice once the link is back."""
    rng, nprng, world, child, parent = four_dcs_with_a_blocked_tree_link(seed)
    world.net.capacity = capacity
    link = (child, parent)               # stuck: what is buffered does not arrive either
    world.net.buffers[link] = []
    expected = contribute(world, nprng, chunks=64, size=500, rnd=1)
    parent_node = world.wan[child].servers[link[1]]
    for _ in range(rng.randint(0, 30)):
        world.step()
    while not world.wan[child].outbox.waiting(parent_node):    # until data waits for it
        assert world.step(), "nothing ever waited for the blocked link"
    world.clock.t += 2.0                 # longer than stall_s with data waiting
    for wan in world.wan.values():
        wan.check_stalls()
    assert world.wan[child].report().get("stalled") == [link[1]]
    while world.step():
        world.flush_all()
    check(world, expected, 1)            # the round completed around the link
    late = len(world.net.buffers[link])
    world.net.blocked.discard(link)      # the link comes back: its buffered copies arrive late
    while world.step():
        world.flush_all()
    check(world, expected, 1)            # and count once
    assert late == capacity


def test_untimed_links_get_a_probe_burst_and_timed_ones_do_not():
    """A link is probed when for ``every_s`` nothing crossed it that its receiver could time
    (a message that waited behind another): idle, or only lone messages."""
    rng = random.Random(0)
    world = World(rng, 3, random_policy(["dc0", "dc1", "dc2"], rng, max_trees=1),
                  chunk_bytes=1 << 16)
    wan = world.wan["dc0"]
    world.clock.t = 100.0
    wan.probe_idle(every_s=10.0)
    bursts = {dst: len(q) for (src, dst), q in world.net.buffers.items() if src == "dc0"}
    pieces = {v: probe_pieces(wan.router.rates[("dc0", v)]) for v in ("dc1", "dc2")}
    assert bursts == pieces and all(8 <= n <= 32 for n in pieces.values())
    for (src, dst), q in world.net.buffers.items():
        q.clear()
    world.clock.t = 105.0
    wan.probe_idle(every_s=10.0)                     # probed 5 s ago: not yet
    world.clock.t = 116.0
    # dc1's link just carried a message that had waited (its receiver timed it); dc2's only
    # a lone message, which times nothing
    wan.send("dc1", wire.Message(wire.Kind.INIT, flags=wire.Flag.QUEUED))
    wan.send("dc2", wire.Message(wire.Kind.INIT))
    wan.probe_idle(every_s=10.0)
    sent = {dst: [wire.decode(f).kind for f in q] for (src, dst), q in world.net.buffers.items()
            if src == "dc0" and q}
    assert sent == {"dc1": [wire.Kind.INIT],
                    "dc2": [wire.Kind.INIT] + [wire.Kind.PROBE] * pieces["dc2"]}


def test_a_probe_burst_lasts_about_a_quarter_second_at_the_known_rate():
    assert probe_pieces(0.0) == 8 and probe_pieces(1e6) == 32
    assert probe_pieces(40.0) == 19                  # 0.25 s at 40 Mbit/s = 1.25 MB


@pytest.mark.parametrize("seed", range(6))
def test_a_new_relay_plan_re_splits_chunks_still_waiting(seed):
    """A link slows mid-round (here: blocked, so chunks wait for it); the scheduler's next
    plan sends part of its traffic through a relay. Whole chunks still waiting are split by
    the new plan at once; parts and chunks already handed over stay as they are. Sums exact."""
    rng, nprng, world, child, parent = four_dcs_with_a_blocked_tree_link(seed)
    expected = contribute(world, nprng, chunks=8, size=600, rnd=1)
    node = world.wan[child].servers[parent]
    while not world.wan[child].outbox.waiting(node):
        assert world.step(), "nothing ever waited for the slow link"
    waiting = world.wan[child].outbox.waiting(node)
    relay = rng.choice([dc for dc in world.dcs if dc not in (child, parent)])
    world.wan[child].on_routes({"relays": [[child, parent, relay, 0.5]]})
    assert world.wan[child].outbox.waiting(node) == waiting    # as many, now half-size parts
    relayed = [wire.decode(f) for f in world.net.buffers.get((child, relay), [])]
    assert sum(m.kind == wire.Kind.RELAY and m.meta["to"] == parent for m in relayed) >= 1
    world.net.blocked.discard((child, parent))
    while world.step():
        world.flush_all()
    check(world, expected, 1)
    assert all(w.reassembly.pending == 0 for w in world.wan.values())


def test_other_messages_over_a_link_count_towards_its_estimate():
    """A 4 MiB INIT between QUEUED chunks took the link for its own time: counted (via
    note_arrival) the link reads its real 80 Mbit/s; if it were left out, the chunk after
    it would read the INIT's time as its own."""
    from netstorm.geoserver.core.wire import Flag, Kind, Message
    clock = Clock()
    po = type("PO", (), {"van": Net().van("b", {1: "a", 2: "b"}),
                         "connect": lambda self, node, send_hwm=0: None})()
    wan = WanTransport("b", {"a": 1, "b": 2}, po, {("a", "b"): 80.0, ("b", "a"): 80.0},
                       1 << 20, stall_s=1.0, clock=clock)
    wan.deliver_to(lambda *chunk: None)
    chunk = np.zeros(1 << 18, np.float32)                       # 1 MiB
    def received(msg):                                          # frames as off the wire
        return wire.decode([bytes(f) for f in wire.encode(msg)])
    init = received(Message(Kind.INIT, key=9, seq=1, flags=Flag.QUEUED | Flag.HAS_VALUE,
                            dtype=np.float32, frames=[np.zeros(1 << 20, np.float32)]))
    for i in range(12):
        clock.t += (4 if i % 3 == 1 else 1) * 8 * (1 << 20) / 80e6
        if i % 3 == 1:
            wan.note_arrival("a", init)
        else:
            wan.on_message("a", received(Message(Kind.CHUNK_UP, key=0, chunk=i, seq=1,
                                                 policy=1, flags=Flag.QUEUED,
                                                 dtype=np.float32, frames=[chunk])))
    mbps, _ = wan.monitor.estimates(clock.t)["a"]
    assert abs(mbps - 80.0) < 2.0, mbps


def test_a_server_away_longer_than_away_s_tells_its_queues_links_may_have_drained():
    from netstorm.geoserver.server.wan.transport import AWAY_S
    calls = []
    wan = WanTransport.__new__(WanTransport)            # only the outbox is involved
    wan.outbox = type("Outbox", (), {"paused": lambda self: calls.append("paused"),
                                     "flush": lambda self, node: calls.append(node)})()
    wan.flush([1], away_s=AWAY_S / 2)
    assert calls == [1]
    wan.flush([1, 2], away_s=AWAY_S)
    assert calls == [1, "paused", 1, 2]
