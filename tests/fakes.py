"""Stand-ins shared by the socket-free tests (``from fakes import ...``; tests/ is on sys.path
under pytest): a clock the test moves, a Van's sending side (alone, or on a network of FIFO
links), the scheduler's Van recording what it sends, a 3-DC node table, random policies,
one tree exchange per DC, the requests a worker sends, and what a Prometheus scrape of a
collector shows."""
from __future__ import annotations

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from netstorm.geoserver.core import wire
from netstorm.geoserver.core.nodes import NodeInfo
from netstorm.geoserver.server.aggregation import TreeExchange
from netstorm.geoserver.policy.tree import Policy, PolicyBook
from netstorm.geoserver.core.wire import Flag, Kind, Message
from netstorm.scheduler.policy import random_trees


class Clock:
    """A clock that stands still until the test moves it (``clock.t += 2.0``)."""

    def __init__(self, t: float = 0.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


class FakeVan:
    """The sending side of a Van, as a SendQueue uses it: a peer takes ``room[peer]`` more
    messages, then reports a full queue; ``sent`` lists ``(peer, key)`` handed over."""

    def __init__(self):
        self.room = {}
        self.sent = []

    def has_room(self, peer) -> bool:
        return self.room.get(peer, 0) > 0

    def take(self, peer, msg) -> None:
        self.room[peer] -= 1
        self.sent.append((peer, msg.key))

    def try_send(self, peer, msg) -> bool:
        if not self.has_room(peer):
            return False
        self.take(peer, msg)
        return True

    def pending(self) -> bool:
        """Whether a message waits to be received: ``behind`` (set by a test)."""
        return self.behind

    def socket_pending(self) -> bool:
        return self.behind

    behind = False


class RecordingVan:
    """What the scheduler's Van is asked: ``sent`` lists ``(node id, kind, meta)``, ``gone``
    the node ids disconnected; every node is connected."""

    def __init__(self):
        self.sent, self.gone = [], []

    def is_connected(self, node_id):
        return True

    def send(self, node_id, msg):
        self.sent.append((node_id, msg.kind, msg.meta))

    def disconnect(self, node_id):
        self.gone.append(node_id)

    def connect(self, node_id, address, principal=None):
        pass


def three_dc_table() -> list:
    """A scheduler (0), the servers of dc0-dc2 (1-3) and one worker each (4-6, rank = DC)."""
    return [NodeInfo(0, "scheduler", "", "tcp://s:1")] + [
        NodeInfo(1 + i, "server", f"dc{i}", f"tcp://{i}:1") for i in range(3)] + [
        NodeInfo(4 + i, "worker", f"dc{i}", f"tcp://{i}:2", rank=i, local_rank=0)
        for i in range(3)]


class LinkVan(FakeVan):
    """A server's Van on a :class:`Net`: what it takes is encoded to frames and appended to
    the link's buffer; a blocked link takes ``net.capacity`` messages (2 unless set) and
    then reports a full queue."""

    def __init__(self, net: "Net", src: str, name_of: dict):
        super().__init__()
        self.net, self.src, self.name_of = net, src, name_of

    def has_room(self, peer) -> bool:
        link = (self.src, self.name_of[peer])
        return link not in self.net.blocked or \
            len(self.net.buffers.get(link, ())) < self.net.capacity

    def take(self, peer, msg) -> None:
        msg.sender = 0
        frames = [bytes(f) for f in wire.encode(msg)]
        self.net.buffers.setdefault((self.src, self.name_of[peer]), []).append(frames)


class Net:
    """Links as FIFO buffers of encoded messages; a blocked link delivers nothing."""

    def __init__(self):
        self.buffers = {}          # (src, dst) -> [frames]
        self.blocked = set()
        self.capacity = 2          # messages a blocked link takes (socket buffers, queues)

    def van(self, src: str, name_of: dict) -> LinkVan:
        """``name_of``: server node id -> DC name."""
        return LinkVan(self, src, name_of)

    def deliverable(self) -> list:
        return [link for link, q in self.buffers.items() if q and link not in self.blocked]


def random_policy(dcs, rng, max_trees: int, version: int = 1, start_round: int = 0,
                  split: bool = False) -> Policy:
    """Random spanning trees over ``dcs`` with random shares; with ``split``, about half of
    them broadcast along a random tree of their own."""
    trees, shares = random_trees(list(dcs), rng, max_trees=max_trees, split=split)
    return Policy(version, start_round, tuple(trees), tuple(shares))


DATAPLANE = {"name": "python"}     # which aggregation exchanges() builds (the dataplane
                                   # fixture of tests/unit/conftest.py sets it)


def exchanges(dcs, policies, send_of, deliver_of) -> dict:
    """One TreeExchange per DC (or, with ``DATAPLANE["name"] == "native"``, the compiled data
    plane's aggregation behind the same interface), each on its own PolicyBook of
    ``policies``, sending through ``send_of(dc)`` and delivering totals to
    ``deliver_of(dc)``."""
    found = {}
    for dc in dcs:
        book = PolicyBook(policies[0])
        for policy in policies[1:]:
            book.add(policy)
        if DATAPLANE["name"] == "native":
            from netstorm.geoserver.server.native_socket_free import socket_free_exchange
            found[dc] = socket_free_exchange(dc, book, send_of(dc), deliver_of(dc),
                                             dcs=list(dcs))
        else:
            found[dc] = TreeExchange(dc, book, send=send_of(dc), deliver=deliver_of(dc))
    return found


def init_message(worker, key, value=None, shape=None, gen=1, request=0) -> Message:
    """A worker's INIT of a float32 key; rank 0's carries ``value``."""
    shape = [value.size] if shape is None else list(shape)
    return Message(Kind.INIT, sender=worker, key=key, seq=gen, request=request,
                   flags=Flag.HAS_VALUE if value is not None else Flag.NONE,
                   meta={"shape": shape, "dtype": "<f4"}, dtype=np.float32,
                   frames=[] if value is None else [value.ravel()])


def push_message(worker, key, rnd, value, want=True, request=0) -> Message:
    """A worker's PUSH of round ``rnd`` of a float32 key."""
    return Message(Kind.PUSH, sender=worker, key=key, seq=rnd, request=request,
                   flags=Flag.WANT_VALUE if want else Flag.NONE, dtype=np.float32,
                   frames=[value])


class FakePostoffice:
    """What a GeoServer uses of its Postoffice, without sockets: the node table, its own
    node, the WELCOME's settings and policy; what it sends to workers lands in ``sent``,
    to the scheduler in ``to_scheduler``, to other servers (through its WAN transport's
    send queue) in ``van.sent``, which takes everything."""

    def __init__(self, table, me: int, settings, policy, rejoined: bool = False):
        self.table, self.me, self.settings = table, table[me], settings
        self.welcome_policy = None if policy is None else policy.to_json()
        self.rejoined = rejoined
        self.van = FakeVan()
        self.sent, self.to_scheduler = [], []

    def connect(self, node_id, send_hwm=0) -> None:
        self.van.room[node_id] = float("inf")

    def send(self, node_id, msg) -> None:
        self.sent.append((node_id, msg))

    def send_scheduler(self, msg) -> None:
        self.to_scheduler.append(msg)

    def take_early(self) -> list:
        return []

    def scheduler_verdict(self, now) -> str:
        """The scheduler is alive (its judgment is the Postoffice's: test_postoffice.py)."""
        return ""

    def judge_scheduler(self) -> None:
        """A new scheduler's silence is judged from now on (the Postoffice's)."""
        self.judged = getattr(self, "judged", 0) + 1


def samples_of(text: str) -> dict:
    """Prometheus text as prometheus_client's own parser reads it: ``{(name, sorted
    labels): value}``."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def scraped(collector) -> dict:
    """What a scrape of ``collector`` shows (:func:`samples_of` its text)."""
    registry = CollectorRegistry()
    registry.register(collector)
    return samples_of(generate_latest(registry).decode())


def sample(samples: dict, name: str, **labels):
    """The one value of series ``name`` whose labels include ``labels`` (None: none)."""
    found = [v for (n, l), v in samples.items() if n == name and
             set(labels.items()) <= set(l)]
    assert len(found) <= 1, found
    return found[0] if found else None
