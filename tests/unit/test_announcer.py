"""The policies the scheduler announces (scheduler/announcer.py): the first one logged, new
versions sent to every server, and with the round gate each round opened once."""
from netstorm.geoserver.config.cluster import pseudo_cluster
from netstorm.geoserver.config.links import Link
from netstorm.geoserver.core import wire
from netstorm.scheduler.announcer import PolicyAnnouncer
from netstorm.scheduler.policy import star_policy


def _announcer(round_gate):
    sent, stats = [], []
    links = (Link("dc0", "dc1", 100.0, 100.0),) if round_gate else ()     # adapt
    announcer = PolicyAnnouncer(pseudo_cluster(2, 1, 1, links=links), round_gate, stats.append,
                                lambda kind, meta, seq=0: sent.append((kind, seq, meta)))
    announcer.start(star_policy(["dc0", "dc1"], "dc0"), None)
    return announcer, sent, stats


def test_the_first_policy_is_logged_and_a_new_version_goes_to_every_server():
    announcer, sent, stats = _announcer(round_gate=False)
    assert announcer.adaptation is None and announcer.wan_topology is None
    assert [(s["event"], s["reason"], s["version"]) for s in stats] == [
        ("policy", "initial", 1)]
    first = announcer.rounds.policy
    policy = announcer.announce(first.trees, first.shares, lead_rounds=2)
    assert policy.version == 2 and announcer.rounds.policy is policy
    assert sent == [(wire.Kind.POLICY, 0, {"policy": policy.to_json()})]


def test_with_the_round_gate_a_round_reported_is_opened_everywhere_once():
    announcer, sent, stats = _announcer(round_gate=True)
    announcer.report(1, "dc0", {"round": 3})
    announcer.report(2, "dc1", {"round": 3})       # open already
    announcer.report(2, "dc1", {"round": 2})       # behind: nothing to open
    assert sent == [(wire.Kind.ROUND_OPEN, 3, {})] and announcer.rounds.opened == 3
    assert [s["event"] for s in stats] == ["policy", "round_open"]
    policy = announcer.announce(announcer.rounds.policy.trees, announcer.rounds.policy.shares)
    assert policy.start_round == 4              # the first round not yet open
