"""scheduler/joining.py: a DC whose place was held joins a running elastic cluster once
its server and every worker registered; the members freeze, it copies their replicas and
every server replays over the members and it."""
from netstorm.geoserver.config.cluster import pseudo_cluster
from netstorm.geoserver.core import wire
from netstorm.geoserver.core.nodes import NodeTable
from netstorm.geoserver.policy.tree import Policy
from netstorm.scheduler.announcer import PolicyAnnouncer
from netstorm.scheduler.departing import DcDeparting
from netstorm.scheduler.joining import DcJoining, placeholder_address
from netstorm.scheduler.liveness import Liveness
from netstorm.scheduler.membership import member_policy
from fakes import RecordingVan, three_dc_table

D1, D2 = "1" * 64, "2" * 64
DCS = ["dc0", "dc1", "dc2"]


def _joining(min_dcs=2):
    """dc0 and dc1 run (star at dc0); dc2's place is held (node 3 its server, 6 its
    worker)."""
    config = pseudo_cluster(3, 1, 1, min_dcs=min_dcs)
    van, welcomed = RecordingVan(), []
    liveness = Liveness(config, van, check_stop=lambda: None)
    liveness.table = NodeTable(three_dc_table())
    policies = PolicyAnnouncer(config, False, lambda record: None, lambda *a, **k: None)
    policies.start(member_policy(config, ["dc0", "dc1"], 1, 0), None)
    departing = DcDeparting(config, van, lambda record: None, policies, liveness)
    joining = DcJoining(config, van, lambda record: None, policies, liveness, departing,
                        lambda nodes, policy, rejoined: welcomed.append(
                            ([n.id for n in nodes], policy, rejoined,
                             liveness.table[6].address, len(van.sent))))
    assert joining.hold_places(["dc2"]) == {3, 6}
    return joining, van, welcomed


def _register(role, local_index=-1, port=7):
    return {"role": role, "dc": "dc2", "address": f"tcp://127.0.0.1:{port}",
            "local_index": local_index, "host": "h"}


def test_a_held_dc_joins_once_complete_copies_the_members_and_replays_over_all():
    joining, van, welcomed = _joining()
    membership = joining.departing.membership
    assert membership.members == ("dc0", "dc1") and {3, 6} <= joining.liveness.finished
    assert joining.claims(_register("worker", 0)) and not joining.claims(
        {**_register("worker", 0), "dc": "dc1"})
    assert joining.register(_register("worker", 0, port=8)) == ""
    assert not van.sent and not welcomed            # its server has not registered yet
    assert joining.register(_register("server")) == ""
    assert [w[0] for w in welcomed] == [[3], [6]]  # the server first, with no policy yet
    assert welcomed[0][1] is None and welcomed[1][2]
    # the server's table has its worker's address, and the members knew the server's first
    assert welcomed[0][3] == "tcp://127.0.0.1:8" and welcomed[0][4] == 4
    table = joining.liveness.table
    assert table[3].address == "tcp://127.0.0.1:7" and table[6].address == "tcp://127.0.0.1:8"
    assert not joining.absent_nodes and not {3, 6} & joining.liveness.finished
    recover = [(n, meta) for n, kind, meta in van.sent if kind == wire.Kind.RECOVER]
    assert recover == [(1, {"dc": "dc2", "version": 2, "change": "joins"}),
                       (2, {"dc": "dc2", "version": 2, "change": "joins"})]
    assert [n for n, kind, _ in van.sent if kind == wire.Kind.NODE_MOVED] == [1, 2]
    van.sent.clear()
    joining.on_state_report("dc0", {"keys": [[0, 4, D1]]})
    joining.on_state_report("dc1", {"keys": [[0, 4, D1]]})
    replays = [(n, meta) for n, kind, meta in van.sent if kind == wire.Kind.REPLAY]
    assert [n for n, _ in replays] == [1, 2, 3]
    assert replays[0][1]["keys"] == [[0, 4, ["dc0", "dc1"], D1]]    # dc2 copies key 0
    policy = Policy.from_json(replays[0][1]["policy"], DCS, elastic=True)
    assert (policy.version, policy.start_round, policy.members) == (2, 5, tuple(DCS))
    assert membership.members == tuple(DCS)
    assert joining.on_recovered("dc0") and joining.on_recovered("dc1")
    assert joining.current is not None
    assert joining.on_recovered("dc2") and joining.current is None    # the joiner too


def test_a_dc_that_left_is_refused_naming_why_and_a_join_waits_for_another_change():
    joining, van, _ = _joining()
    joining.departing.membership.departed["dc2"] = "was killed"
    assert "dc2 left the run (was killed), and no rejoin is left" in \
        joining.register(_register("server"))
    joining, van, _ = _joining()
    joining.register(_register("worker", 0))
    joining.departing.current = object()            # a DC is leaving
    assert joining.register(_register("server")) == ""      # held, registered
    assert not [kind for _, kind, _ in van.sent if kind == wire.Kind.RECOVER]
    joining.start_waiting()                         # still leaving: it waits on
    assert joining.current is None
    joining.departing.current = None                # that change is over
    joining.start_waiting()
    assert joining.current is not None and joining.current.lost_dc == "dc2"
    assert [n for n, kind, _ in van.sent if kind == wire.Kind.RECOVER] == [1, 2]
    assert joining.register({**_register("server"), "address": 5}) == \
        "registration carries no valid address"


def test_an_absent_dc_is_said_to_be_at_its_file_address():
    config = pseudo_cluster(1, 1, 1)
    assert placeholder_address(config.dcs[0]) == "tcp://127.0.0.1:1"
