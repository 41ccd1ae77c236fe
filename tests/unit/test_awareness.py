"""scheduler.awareness: the scheduler's view of the links and its re-planning hysteresis."""
import pytest

from netstorm.scheduler.awareness import STALLED_MBPS, Adaptation, LinkRates, Replanner
from netstorm.scheduler.planning import compute_policy, predict_iteration_s
from netstorm.wan import load_topology

B, CHUNK = 50e6, 1 << 20


def test_observations_replace_declared_rates_newest_first():
    rates = LinkRates(load_topology("small"))
    assert rates.observe("dc0", "dc1", 12.5, age_s=1.0, now=10.0)
    assert not rates.observe("dc0", "dc1", 99.0, age_s=5.0, now=10.0)     # older than known
    assert not rates.observe("dc0", "nowhere", 1.0, 0.0, 10.0)
    assert not rates.observe("dc0", "dc1", float("nan"), 0.0, 10.0)
    assert rates.topology().rate("dc0", "dc1") == 12.5
    snap = rates.snapshot(12.0)
    assert snap["dc0->dc1"] == [12.5, 3.0, False] and snap["dc1->dc0"][1] is None


def test_a_stalled_link_is_left_out_while_the_rest_stays_connected():
    paper9 = load_topology("paper9")
    rates = LinkRates(paper9)
    rates.observe_stall("dc8", "dc9", now=1.0)
    topo = rates.topology()
    assert not any({l.a, l.b} == {"dc8", "dc9"} for l in topo.links)
    assert len(topo.links) == len(paper9.links) - 1
    rates.observe_stall("dc6", "dc9", now=2.0)          # dc9's last link: it has to stay
    topo = rates.topology()
    kept = [l for l in topo.links if "dc9" in (l.a, l.b)]
    assert len(kept) == 1 and STALLED_MBPS in (kept[0].mbps_ab, kept[0].mbps_ba)
    rates.observe("dc8", "dc9", 20.0, 0.0, 3.0)         # measured again: back in use
    assert rates.stalled() == [("dc6", "dc9")]


def test_a_replaced_dcs_links_are_back_at_their_declared_rates_until_measured_again():
    paper9 = load_topology("paper9")
    rates = LinkRates(paper9)
    rates.observe_stall("dc1", "dc3", now=1.0)
    rates.observe("dc3", "dc4", 2.0, age_s=0.0, now=1.0)
    rates.observe("dc4", "dc5", 7.0, age_s=0.0, now=1.0)
    rates.forget("dc3", now=5.0)
    topo = rates.topology()
    assert rates.stalled() == [] and topo.rate("dc3", "dc4") == paper9.rate("dc3", "dc4")
    assert topo.rate("dc4", "dc5") == 7.0                  # other links keep their estimates
    assert not rates.observe("dc1", "dc3", 3.0, age_s=2.0, now=6.0)    # made while it was down
    assert rates.observe("dc1", "dc3", 30.0, age_s=0.5, now=6.0)


def test_replanning_needs_the_threshold_and_the_dwell_time():
    topo = load_topology("paper9")
    policy = compute_policy(topo, B, CHUNK).policy
    replanner = Replanner(B, CHUNK, threshold=0.1, min_dwell_s=5.0)
    replanner.switched(0.0)
    assert replanner.consider(policy, topo, now=1.0) is None                 # dwelling
    same = replanner.consider(policy, topo, now=6.0)
    assert not same.switch and same.current_s == pytest.approx(same.best_s, rel=0.01)
    slower = topo.with_rates({("dc9", "dc6"): 5.0, ("dc6", "dc9"): 5.0})
    first = replanner.consider(policy, slower, now=7.0)
    assert not first.switch and first.current_s > 1.1 * first.best_s        # confirm first
    assert not replanner.consider(policy, topo, now=7.5).switch             # it was noise
    assert not replanner.consider(policy, slower, now=8.0).switch           # seen anew
    decision = replanner.consider(policy, slower, now=9.0)
    assert decision.switch and decision.current_s > 1.1 * decision.best_s
    new = decision.plan.policy
    assert predict_iteration_s(new, slower, B, CHUNK) == pytest.approx(decision.best_s)
    assert replanner.consider(new, slower, now=10.0) is None                 # dwell restarts
    assert replanner.consider(policy, slower, now=10.0, urgent=True).switch  # unless urgent
    slightly = slower.with_rates({("dc1", "dc2"): 0.97 * slower.rate("dc1", "dc2")})
    assert not replanner.consider(new, slightly, now=30.0).switch           # within threshold


def test_adaptation_reads_reports_and_leaves_a_stalled_link_at_once():
    topo = load_topology("paper9")
    policy = compute_policy(topo, B, CHUNK).policy
    log = []
    replanner = Replanner(B, CHUNK, threshold=0.1, min_dwell_s=60.0)
    replanner.switched(0.0)
    adapt = Adaptation(topo, replanner, stats=log.append, every_s=1.0)
    adapt.on_report("dc9", {"round": 0, "links": {"dc6": [5.0, 0.1]}}, 0.5)   # start-up
    assert adapt.rates.rates[("dc6", "dc9")].at is None                     # not taken
    adapt.on_report("dc8", {"round": 1}, 0.7)                               # training
    adapt.on_report("dc9", {"links": {"dc6": [80.0, 0.2], "bogus": "x", "dc8": [1, 2, 3]}}, 1.0)
    adapt.on_report("dc6", {"links": {"dc8": [7.0, 0.9]}}, 1.0)    # made before round 1
    assert adapt.rates.rates[("dc6", "dc9")].mbps == 80.0
    assert adapt.rates.rates[("dc8", "dc6")].at is None
    assert adapt.tick(policy, now=1.0, round_now=3) is None                  # dwelling
    tree_link = next((c, p) for t in policy.trees for c, p in t.parent.items() if p)
    adapt.on_report(tree_link[0], {"stalled": [tree_link[1], 42]}, 2.0)
    plan = adapt.tick(policy, now=2.0, round_now=4)                          # dwell or not
    assert plan is not None
    assert all(set(edge) != set(tree_link) for t in plan.policy.trees
               for edge in t.parent.items() if edge[1])
    assert log and log[-1]["event"] == "rates" and log[-1]["round"] == 4


def test_a_switch_starts_next_round_only_while_the_current_round_is_young():
    from netstorm.scheduler.awareness import safe_start_round
    seen = {3: 100.0, 4: 120.0, 5: 140.0}          # rounds of 20 s; round 5 began at 140
    assert safe_start_round(5, seen, now=141.0, margin_s=2.0) == 6     # young: next round
    assert safe_start_round(5, seen, now=149.0, margin_s=2.0) == 7     # past half: skip one
    assert safe_start_round(5, {5: 140.0}, now=141.0, margin_s=2.0) == 7   # no history
    assert safe_start_round(5, {3: 100.0, 5: 140.0}, now=141.0, margin_s=2.0) == 7


def test_nothing_is_re_planned_while_the_policy_and_the_rates_stand_still():
    """Static rates: one plan, then none until a trusted rate moves by more than 10% or the
    policy changes; a drop is trusted once a round took as long as it predicts, and a
    pending better policy is then confirmed on the next ticks."""
    topo = load_topology("paper9")
    policy = compute_policy(topo, B, CHUNK).policy
    replanner = Replanner(B, CHUNK, threshold=0.1, min_dwell_s=0.0, confirm_s=1.0)
    adapt = Adaptation(topo, replanner, every_s=1.0)
    steady = predict_iteration_s(policy, topo, B, CHUNK)
    seen = {1: 0.0, 2: 0.0}                 # round 1 opens with round 2

    def tick(now, round_seconds=None):
        if round_seconds is not None:
            last = max(seen)
            seen[last + 1] = seen[last] + round_seconds
        return adapt.tick(policy, now=now, round_now=max(seen), round_seen=seen,
                          policy_for_round=lambda k: policy)

    declared = topo.rates()[("dc6", "dc9")]
    adapt.on_report("dc9", {"round": 1, "links": {"dc6": [declared, 0.0]}}, 0.0)
    for t in range(1, 6):
        assert tick(float(t), steady) is None
    assert adapt.plans == 1 and len(adapt.trust.window) >= 3
    adapt.on_report("dc9", {"links": {"dc6": [declared * 1.05, 0.0]}}, 6.0)   # 5%: too little
    tick(6.0, steady)
    assert adapt.plans == 1
    link = next((c, p) for t in policy.trees for c, p in t.parent.items() if p)
    adapt.on_report(link[1], {"links": {link[0]: [1.0, 0.0]}}, 7.0)    # a tree link drops
    assert tick(7.0, steady) is None and adapt.plans == 1     # the rounds say otherwise
    dropped = adapt.rates.topology()
    assert tick(7.5, predict_iteration_s(policy, dropped, B, CHUNK)) is None   # unconfirmed
    assert adapt.plans == 2
    plan = tick(8.5)                                                  # pending: confirmed
    assert plan is not None and adapt.plans == 3


def test_a_stall_reported_between_ticks_reaches_the_relay_plan_at_once():
    """Relays are planned on the trusted rates, but a direction stalled since the last
    tick keeps its stall there (it is not overwritten by the rate trusted before). Two
    DCs: their one link cannot be left out, so it stays at the stalled rate."""
    from netstorm.scheduler.topology import Link, Topology
    topo = Topology("two", ("p", "q"), (Link("p", "q", 40.0, 40.0),))
    adapt = Adaptation(topo, Replanner(B, CHUNK, threshold=0.1, min_dwell_s=60.0),
                       multipath=True)
    adapt.on_report("p", {"stalled": ["q"]}, 1.0)
    assert adapt.planning_topology().rate("p", "q") == STALLED_MBPS
    assert adapt.planning_topology().rate("q", "p") == 40.0
