"""TreeExchange: aggregate-forward over random trees, messages delivered in random order."""
import random

import numpy as np
import pytest

from netstorm.geoserver.server.aggregation import TreeExchange
from netstorm.geoserver.policy.chunking import ChunkId, ENTRY_BYTES
from netstorm.geoserver.policy.tree import Policy, PolicyBook, Tree
from netstorm.geoserver.core.wire import Kind
from netstorm.scheduler.policy import random_trees, star_policy


@pytest.fixture(autouse=True)
def _both_implementations(dataplane, monkeypatch):
    """Every test runs on TreeExchange (the specification) and on the compiled data plane's
    counterpart, with the same assertions (``dataplane``: tests/unit/conftest.py)."""
    if dataplane == "native":
        from netstorm.geoserver.server.native_socket_free import socket_free_exchange
        monkeypatch.setitem(globals(), "TreeExchange", socket_free_exchange)


def cid(key, chunk, rnd, policy):
    return ChunkId(key, chunk, rnd, policy.version, (key + chunk) % len(policy.trees))


def simulate(policy, dcs, contributions, rng, edges=None):
    """Run one exchange per DC; return what each DC got delivered and the message count
    (``edges`` collects (source, target, kind) of every message)."""
    inbox, delivered = [], {dc: {} for dc in dcs}

    def make(dc):
        def send(target, kind, chunk_id, array, encoded=False):
            assert not encoded
            inbox.append((dc, target, kind, chunk_id, np.array(array)))

        def deliver(key, chunk, rnd, total):
            assert (key, chunk, rnd) not in delivered[dc], "delivered twice"
            delivered[dc][(key, chunk, rnd)] = np.array(total)
        return TreeExchange(dc, PolicyBook(policy), send, deliver)
    ex = {dc: make(dc) for dc in dcs}
    events = [(dc, ident, arr) for (dc, ident), arr in contributions.items()]
    rng.shuffle(events)
    for dc, ident, arr in events:
        ex[dc].contribute(cid(*ident, policy), arr)
    sent = 0
    while inbox:
        source, target, kind, chunk_id, arr = inbox.pop(rng.randrange(len(inbox)))
        sent += 1
        if edges is not None:
            edges.append((source, target, kind))
        handler = ex[target].on_up if kind == Kind.CHUNK_UP else ex[target].on_down
        handler(source, chunk_id, arr)
    assert all(e.in_flight == 0 for e in ex.values())
    return delivered, sent


@pytest.mark.parametrize("seed", range(20))
def test_random_trees_give_every_dc_the_bit_identical_exact_sum(seed):
    """Odd seeds mix shared trees with split ones (the total descends a tree of its own)."""
    rng = random.Random(seed)
    dcs = [f"dc{i}" for i in range(rng.randint(1, 7))]
    trees, _ = random_trees(dcs, rng, split=seed % 2 == 1)
    policy = Policy(1, 0, tuple(trees))
    np_rng = np.random.RandomState(seed)
    idents = [(k, c, r) for k in range(3) for c in range(2) for r in (1, 2)]
    contributions = {(dc, ident): np_rng.randint(-50, 50, size=17).astype(np.float32)
                     for dc in dcs for ident in idents}
    delivered, sent = simulate(policy, dcs, contributions, rng)
    for ident in idents:
        want = sum(contributions[(dc, ident)] for dc in dcs)
        for dc in dcs:
            assert np.array_equal(delivered[dc][ident], want)
            assert delivered[dc][ident].tobytes() == delivered[dcs[0]][ident].tobytes()
    # each chunk crosses every aggregation edge once up and every broadcast edge once down
    assert sent == len(idents) * 2 * (len(dcs) - 1)


def test_a_split_tree_sends_partial_sums_up_one_tree_and_the_total_down_the_other():
    """Aggregation a -> b -> c (root c), broadcast c -> a -> b: each edge carries exactly
    the message its direction is planned for, and a total from the aggregation parent is
    refused (it is not the broadcast parent)."""
    tree = Tree("c", {"a": "b", "b": "c", "c": None}, down={"a": "c", "b": "a", "c": None})
    policy = Policy(1, 0, (tree,))
    contributions = {(dc, (0, 0, 1)): np.full(4, i + 1, np.float32)
                     for i, dc in enumerate("abc")}
    edges = []
    delivered, sent = simulate(policy, "abc", contributions, random.Random(0), edges)
    assert sorted(edges) == [("a", "b", Kind.CHUNK_UP), ("a", "b", Kind.CHUNK_DOWN),
                             ("b", "c", Kind.CHUNK_UP), ("c", "a", Kind.CHUNK_DOWN)]
    assert all(np.array_equal(delivered[dc][(0, 0, 1)], np.full(4, 6.0)) for dc in "abc")
    done = []
    ex = TreeExchange("b", PolicyBook(policy), lambda *a: None,
                      lambda *a: done.append(a))
    ex.contribute(ChunkId(0, 0, 1, 1, 0), np.ones(4, np.float32))
    ex.on_down("c", ChunkId(0, 0, 1, 1, 0), np.ones(4, np.float32))
    assert not done
    ex.on_down("a", ChunkId(0, 0, 1, 1, 0), np.ones(4, np.float32))
    assert len(done) == 1


def test_inputs_are_never_modified():
    dcs = ["a", "b", "c"]
    own = {dc: np.full(4, i + 1.0, dtype=np.float32) for i, dc in enumerate(dcs)}
    copies = {dc: a.copy() for dc, a in own.items()}
    contributions = {(dc, (0, 0, 1)): a for dc, a in own.items()}
    simulate(star_policy(dcs, "a"), dcs, contributions, random.Random(0))
    for dc in dcs:
        assert np.array_equal(own[dc], copies[dc])


def test_messages_from_wrong_neighbours_are_dropped(caplog):
    policy = star_policy(["a", "b", "c"], "a")
    sent, got = [], []
    ex = TreeExchange("b", PolicyBook(policy), lambda *m: sent.append(m),
                      lambda *d: got.append(d))
    c = cid(0, 0, 1, policy)
    ex.on_up("c", c, np.ones(2))        # c is not b's child
    ex.on_down("c", c, np.ones(2))      # c is not b's parent
    assert not sent and not got
    assert "not a child" in caplog.text and "not the broadcast parent" in caplog.text
    ex.contribute(c, np.ones(2))
    ex.contribute(c, np.ones(2))        # duplicate own contribution
    assert len(sent) == 1 and "duplicate" in caplog.text


def test_duplicate_totals_are_not_delivered_twice(caplog):
    policy = star_policy(["a", "b"], "a")
    got = []
    ex = TreeExchange("b", PolicyBook(policy), lambda *m: None, lambda *d: got.append(d))
    ex.on_down("a", cid(0, 0, 1, policy), np.ones(2))
    ex.on_down("a", cid(0, 0, 1, policy), np.ones(2))
    assert len(got) == 1 and "duplicate total" in caplog.text


def test_round_set_tracks_out_of_order_rounds():
    from netstorm.geoserver.server.aggregation import RoundSet
    s = RoundSet()
    s.add((0, 0, 2))
    assert (0, 0, 2) in s and (0, 0, 1) not in s
    s.add((0, 0, 1))
    assert (0, 0, 1) in s and (0, 0, 2) in s and (0, 0, 3) not in s and (0, 1, 1) not in s


def test_chunks_of_an_unannounced_policy_wait_for_it():
    first = star_policy(["a", "b"], "a")
    book = PolicyBook(first)
    got = []
    ex = TreeExchange("b", book, lambda *m: None, lambda *d: got.append(d))
    later = star_policy(["a", "b"], "b", version=2, start_round=5)
    ex.on_up("a", ChunkId(0, 0, 5, 2, 0), np.ones(2))      # version 2 not known yet
    assert not got
    book.add(later)
    ex.contribute(ChunkId(0, 0, 5, 2, 0), np.ones(2))
    assert not got                                          # still waiting for a's part
    ex.policy_added()
    assert len(got) == 1 and np.array_equal(got[0][3], [2, 2])


def test_on_chunk_dispatches_by_kind_and_drops_a_tree_the_policy_lacks(caplog):
    policy = star_policy(["a", "b"], "a")
    got = []
    ex = TreeExchange("b", PolicyBook(policy), lambda *m: None, lambda *d: got.append(d))
    ex.on_chunk("a", Kind.CHUNK_DOWN, ChunkId(0, 0, 1, 1, 5), np.ones(2))
    assert not got
    assert "b: dropped CHUNK_DOWN of key 0 from a: policy 1 has 1 trees, not 6" in caplog.text
    ex.on_chunk("a", Kind.CHUNK_DOWN, ChunkId(0, 0, 1, 1, 0), np.ones(2))
    assert len(got) == 1


def bounded_exchange(**bounds):
    """DC a, the root of a star over a, b and c, with ``bounds``; what it sends lands in
    ``sent``."""
    sent = []
    ex = TreeExchange("a", PolicyBook(star_policy(["a", "b", "c"], "a")),
                      lambda *m: sent.append(m), lambda *d: None, **bounds)
    return ex, sent


def test_chunks_of_rounds_too_far_ahead_are_dropped_not_kept(caplog):
    ex, _ = bounded_exchange(rounds_ahead=2)
    ex.on_up("b", ChunkId(0, 0, 3, 1, 0), np.ones(2))           # round 3 > 0 + 2
    ex.on_down("b", ChunkId(0, 0, 9, 1, 0), np.ones(2))
    assert ex.in_flight == 0 and not ex.held
    assert "round 3 is more than 2 rounds ahead of this DC's round 0" in caplog.text
    ex.on_up("b", ChunkId(0, 0, 2, 1, 0), np.ones(2))           # within the window: kept
    assert ex.in_flight == 1
    ex.contribute(ChunkId(0, 0, 5, 1, 0), np.ones(2))            # this DC moved on to round 5
    ex.on_up("b", ChunkId(0, 0, 7, 1, 0), np.ones(2))
    assert ex.in_flight == 3


def test_a_replacement_at_round_0_keeps_the_replayed_rounds_of_the_survivors(caplog):
    """A new server replays from the planned rounds (REPLAY: forget_after); the survivors'
    chunks of the round after them come before it has copied its state (bench --chaos: a
    server replaced after round 100 stalled the run, every chunk dropped as too far ahead)."""
    ex, _ = bounded_exchange(rounds_ahead=64)
    ex.forget_after({0: 100, 1: 99})
    ex.on_up("b", ChunkId(0, 0, 101, 1, 0), np.ones(2))
    assert ex.in_flight == 1 and "ahead" not in caplog.text
    ex.on_up("b", ChunkId(0, 0, 166, 1, 0), np.ones(2))          # beyond 100 + 64: dropped
    assert ex.in_flight == 1 and "round 166 is more than 64 rounds ahead" in caplog.text


def test_a_replacement_holds_replayed_chunks_that_come_before_its_replay_policy(caplog):
    """The survivors got their REPLAY first and sent round 105 under the replay policy
    (version 2) before the new server (at round 0) got its own: held, not dropped as too
    far ahead; summed once the REPLAY (restart, forget_after, the policy) is in."""
    ex, _ = bounded_exchange(rounds_ahead=64)
    ex.on_up("b", ChunkId(0, 0, 105, 2, 0), np.ones(2))
    assert ex.held.get("b") and ex.in_flight == 0 and "dropped" not in caplog.text
    ex.restart(2)
    ex.forget_after({0: 104})
    ex.policies.add(star_policy(["a", "b", "c"], "a", version=2, start_round=105))
    ex.policy_added()
    assert ex.in_flight == 1 and "dropped" not in caplog.text


def test_bytes_kept_per_neighbour_are_bounded_and_released_when_a_sum_completes(caplog):
    one = np.ones(100, np.float32).nbytes + ENTRY_BYTES
    ex, sent = bounded_exchange(held_bytes=2 * one)
    for key in range(3):                                          # the third is one too many
        ex.on_up("b", ChunkId(key, 0, 1, 1, 0), np.ones(100, np.float32))
    assert ex.held == {"b": 2 * one} and ex.in_flight == 2
    assert f"{2 * one} bytes are already kept for b (at most {2 * one})" in caplog.text
    ex.on_up("c", ChunkId(2, 0, 1, 1, 0), np.ones(100, np.float32))   # c has its own budget
    assert ex.held == {"b": 2 * one, "c": one}
    ex.on_up("c", ChunkId(0, 0, 1, 1, 0), np.ones(100, np.float32))
    ex.contribute(ChunkId(0, 0, 1, 1, 0), np.ones(100, np.float32))    # key 0 completes
    assert len(sent) == 2 and ex.held == {"b": one, "c": one}


def test_a_contribution_of_another_size_or_dtype_is_dropped_not_added(caplog):
    ex, sent = bounded_exchange()
    ex.on_up("b", ChunkId(0, 0, 1, 1, 0), np.ones(4, np.float32))
    ex.on_up("c", ChunkId(0, 0, 1, 1, 0), np.ones(5, np.float32))       # would not broadcast
    ex.on_up("c", ChunkId(0, 0, 1, 1, 0), np.ones(4, np.float64))
    assert "dropped contribution from c to chunk (0, 0, 1): 5 x float32, the partial sum is " \
           "4 x float32" in caplog.text
    ex.on_up("c", ChunkId(0, 0, 1, 1, 0), np.ones(4, np.float32))
    ex.contribute(ChunkId(0, 0, 1, 1, 0), np.ones(4, np.float32))
    assert len(sent) == 2 and np.array_equal(sent[0][3], np.full(4, 3))


def test_chunks_waiting_for_a_policy_are_bounded_per_neighbour_and_released_on_replay():
    one = np.ones(10, np.float32).nbytes + ENTRY_BYTES
    ex, _ = bounded_exchange(held_bytes=one)
    ex.on_up("b", ChunkId(0, 0, 1, 2, 0), np.ones(10, np.float32))      # version 2: unknown
    ex.on_up("b", ChunkId(1, 0, 1, 2, 0), np.ones(10, np.float32))      # over b's bound
    ex.on_up("b", ChunkId(1, 0, 1, 3, 0), np.ones(10, np.float32))
    assert ex.waiting == 1 and ex.held == {"b": one}
    ex.policy_added()                                                 # still unknown: kept
    assert ex.waiting == 1 and ex.held == {"b": one}
    ex.policies.add(star_policy(["a", "b", "c"], "a", version=2, start_round=1))
    ex.policy_added()                                # replayed into a partial sum, still b's
    assert not ex.waiting and ex.in_flight == 1 and ex.held == {"b": one}


def test_a_restart_drops_partial_sums_and_stale_versions_and_sums_the_rounds_again(caplog):
    """A lost server (docs/recovery.md): what was in flight is dropped, chunks of older
    versions are refused from then on, and the rounds forgotten are summed again once."""
    first = star_policy(["a", "b"], "a")
    book = PolicyBook(first)
    got = []
    ex = TreeExchange("a", book, lambda *m: None, lambda *d: got.append(d))
    ex.contribute(ChunkId(0, 0, 1, 1, 0), np.ones(2))
    ex.on_up("b", ChunkId(0, 0, 1, 1, 0), np.ones(2))
    ex.contribute(ChunkId(0, 0, 2, 1, 0), np.ones(2))      # round 2 in flight
    assert len(got) == 1 and ex.in_flight == 1
    ex.restart(2)
    assert ex.in_flight == 0
    ex.on_up("b", ChunkId(0, 0, 2, 1, 0), np.ones(2))      # stale: version 1
    assert "replaced by policy 2" in caplog.text and ex.in_flight == 0
    book.replay(star_policy(["a", "b"], "a", version=2, start_round=1))
    ex.forget_after({0: 0})                                  # key 0 is back at round 0
    for rnd in (1, 2):
        ex.contribute(ChunkId(0, 0, rnd, 2, 0), np.full(2, rnd))
        ex.on_up("b", ChunkId(0, 0, rnd, 2, 0), np.full(2, 10 * rnd))
    assert [(g[2], list(g[3])) for g in got[1:]] == [(1, [11, 11]), (2, [22, 22])]


def test_where_a_chunk_lies_goes_to_the_codec_until_its_total_is_delivered(dataplane):
    if dataplane == "native":
        pytest.skip("compressed chunks take the Python path only (native_plane.choose)")
    """The codec is told where a chunk lies in its key (the store's layout, given with the
    DC's own contribution) when it corrects, encodes and decodes the chunk; the exchange
    forgets it once the chunk's total is delivered, and on a restart."""
    calls = []

    class Recording:
        def own(self, cid, array, where=None):
            calls.append(("own", cid.rnd, where))
            return array

        def encode(self, cid, array, direction, where=None):
            calls.append((direction, cid.rnd, where))
            return array, False

        def decode(self, cid, array, encoded, where=None):
            calls.append(("decode", cid.rnd, where))
            return array
    policy = star_policy(["a", "b"], "a")
    ex = TreeExchange("b", PolicyBook(policy), lambda *m: None, lambda *d: None,
                      codec=Recording())
    ex.on_down("a", ChunkId(0, 0, 3, 1, 0), np.ones(2))      # never contributed: unknown
    ex.contribute(ChunkId(0, 0, 1, 1, 0), np.ones(2), (4, 6, 10))
    ex.on_down("a", ChunkId(0, 0, 1, 1, 0), np.full(2, 2.0))
    assert calls == [("decode", 3, None), ("own", 1, (4, 6, 10)), ("up", 1, (4, 6, 10)),
                     ("decode", 1, (4, 6, 10))]
    assert ex._where == {}
    ex.contribute(ChunkId(0, 0, 2, 1, 0), np.ones(2), (4, 6, 10))
    assert ex._where
    ex.restart(1)
    assert ex._where == {}
