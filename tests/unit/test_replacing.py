"""The scheduler replacing a lost DC server (scheduler/replacing.py): who hears of the new
process, the survivors freeze, the replay plan once all reported, the end once all are back."""
import pytest

from netstorm.geoserver.config.cluster import pseudo_cluster
from netstorm.geoserver.core import wire
from netstorm.geoserver.core.nodes import NodeInfo, NodeTable
from netstorm.scheduler.announcer import PolicyAnnouncer
from netstorm.scheduler.liveness import ClusterAborted, Liveness
from netstorm.scheduler.policy import star_policy
from netstorm.scheduler.replacing import ServerReplacing

D = "1" * 64


class Van:
    def __init__(self):
        self.sent, self.disconnected = [], []

    def disconnect(self, node_id):
        self.disconnected.append(node_id)

    def send(self, node_id, msg):
        self.sent.append((node_id, msg.kind))


def _replacing():
    config = pseudo_cluster(3, 1, 1, server_restarts=1)
    van, welcomed, broadcast = Van(), [], []
    liveness = Liveness(config, van, check_stop=lambda: None)
    liveness.table = NodeTable([
        NodeInfo(0, "scheduler", "", "tcp://s:1"), NodeInfo(1, "server", "dc0", "tcp://a:1"),
        NodeInfo(2, "server", "dc1", "tcp://b:1"), NodeInfo(3, "server", "dc2", "tcp://c:1"),
        NodeInfo(4, "worker", "dc0", "tcp://a:2", rank=0, local_rank=0),
        NodeInfo(5, "worker", "dc1", "tcp://b:2", rank=1, local_rank=0),
        NodeInfo(6, "worker", "dc2", "tcp://c:2", rank=2, local_rank=0)])
    liveness.finished.add(6)
    policies = PolicyAnnouncer(config, False, lambda record: None,
                               lambda kind, meta, seq=0: broadcast.append((kind, meta)))
    policies.start(star_policy(["dc0", "dc1", "dc2"], "dc0"), None)
    replacing = ServerReplacing(config, van, lambda record: None, policies, liveness,
                                lambda nodes, policy, rejoined: welcomed.append(
                                    ([n.id for n in nodes], policy, rejoined)))
    return replacing, van, welcomed, broadcast


def test_a_new_server_is_welcomed_the_others_learn_where_and_the_survivors_freeze():
    replacing, van, welcomed, _ = _replacing()
    replacing.replace(NodeInfo(2, "server", "dc1", "tcp://new:1"), {"pid": 42})
    assert replacing.liveness.table[2].address == "tcp://new:1" and van.disconnected == [2]
    assert welcomed == [([2], None, True)]          # no policy until the replay
    assert van.sent == [(1, wire.Kind.NODE_MOVED), (3, wire.Kind.NODE_MOVED),
                        (5, wire.Kind.NODE_MOVED),  # dc1's worker; not the finished one
                        (1, wire.Kind.RECOVER), (3, wire.Kind.RECOVER)]
    assert replacing.current.lost_dc == "dc1" and replacing.current.survivors == {"dc0", "dc2"}


def test_the_replay_goes_out_once_every_survivor_reported_and_ends_once_all_are_back():
    replacing, _, _, broadcast = _replacing()
    replacing.on_state_report("dc0", {"keys": [[0, 4, D]]})     # none is replaced: ignored
    replacing.replace(NodeInfo(2, "server", "dc1", "tcp://new:1"), {})
    replacing.on_state_report("dc0", {"keys": [[0, 4, D]]})
    assert broadcast == []
    replacing.on_state_report("dc2", {"keys": [[0, 5, D]]})
    (kind, meta), = broadcast
    assert kind == wire.Kind.REPLAY and meta["keys"] == [[0, 5, ["dc2"], D]]
    assert meta["policy"]["start_round"] == 6 and meta["policy"]["version"] == 2
    for dc in ("dc0", "dc2"):
        replacing.on_recovered(dc)
    assert replacing.current is not None
    replacing.on_recovered("dc1")
    assert replacing.current is None


def test_survivors_that_disagree_abort_the_run_naming_the_lost_dc():
    replacing, _, _, _ = _replacing()
    replacing.replace(NodeInfo(2, "server", "dc1", "tcp://new:1"), {})
    replacing.on_state_report("dc0", {"keys": [[0, 5, D]]})
    with pytest.raises(ClusterAborted, match="replacing the server of dc1: the replicas of "
                                             "key 0 after round 5 differ"):
        replacing.on_state_report("dc2", {"keys": [[0, 5, "2" * 64]]})


def _lose(replacing, *dcs):
    for dc in dcs:
        node = replacing.liveness.table.server_of(dc)
        assert replacing.liveness.lose(node.id, "sent nothing", replacing.current is not None)


def _rejoin(replacing, dc, node_id):
    node, why = replacing.liveness.lost.rejoin({"role": "server", "dc": dc,
                                                "address": f"tcp://new-{dc}:1"})
    assert node is not None and node.id == node_id, why
    replacing.replace(node, {})


def test_recovery_of_two_servers_lost_at_once_starts_once_both_are_back():
    """dc1 and dc2 lost together: dc1's new server waits (no freeze yet); once dc2's
    registers, dc0 alone freezes, and the plan has both copy from it."""
    replacing, van, welcomed, broadcast = _replacing()
    _lose(replacing, "dc1", "dc2")
    _rejoin(replacing, "dc1", 2)
    assert replacing.current is None and replacing.pending == {"dc1"}
    assert wire.Kind.RECOVER not in [kind for _, kind in van.sent]
    _rejoin(replacing, "dc2", 3)
    assert replacing.current.lost_dcs == ("dc1", "dc2")
    assert [n for n, kind in van.sent if kind == wire.Kind.RECOVER] == [1]
    replacing.on_state_report("dc0", {"keys": [[0, 4, D]]})
    (kind, meta), = broadcast
    assert kind == wire.Kind.REPLAY and meta["keys"] == [[0, 4, ["dc0"], D]]
    for dc in ("dc0", "dc1", "dc2"):
        replacing.on_recovered(dc)
    assert replacing.current is None


def test_recovery_restarts_when_a_survivor_is_lost_during_a_replacement():
    """dc1 is being replaced when dc2's server dies: the replacement is on hold (no
    timeout of its own while dc2 is awaited), then starts again with both lost, under a
    new version; dc0 freezes again. All lost: the run ends naming them."""
    replacing, van, _, broadcast = _replacing()
    _lose(replacing, "dc1")
    _rejoin(replacing, "dc1", 2)
    replacing.on_state_report("dc0", {"keys": [[0, 4, D]]})
    _lose(replacing, "dc2")
    assert replacing.current.overdue(replacing.current.deadline + 1) == ""   # on hold
    _rejoin(replacing, "dc2", 3)
    assert replacing.current.lost_dcs == ("dc1", "dc2") and broadcast == []
    recovers = [n for n, kind in van.sent if kind == wire.Kind.RECOVER]
    assert recovers == [1, 3, 1]            # dc0 and dc2 the first time, dc0 again
    replacing.on_state_report("dc0", {"keys": [[0, 4, D]]})
    (kind, meta), = broadcast
    assert meta["policy"]["version"] == 2 and meta["keys"] == [[0, 4, ["dc0"], D]]
    replacing.on_recovered("dc0")
    _lose(replacing, "dc0")                 # dc1 and dc2 not back yet: nothing survives
    with pytest.raises(ClusterAborted, match="the servers of every DC .dc0, dc1, dc2. were "
                                             "lost"):
        _rejoin(replacing, "dc0", 1)


def test_recovery_tells_a_new_esync_server_again_of_the_workers_that_finished():
    """esync: the rounds after a finished worker's last go on without it; a new server
    hears of it again (WORKER_LEFT, as the others did when it finished)."""
    replacing, van, _, _ = _replacing()
    replacing.liveness.departures[5] = {"rank": 1, "pushes": [[0, 7]], "who": "worker"}
    _lose(replacing, "dc1")
    _rejoin(replacing, "dc1", 2)
    assert (2, wire.Kind.WORKER_LEFT) in van.sent
    assert [n for n, kind in van.sent if kind == wire.Kind.WORKER_LEFT] == [2]
