"""scheduler.trust: link estimates are acted on only once they explain the rounds."""
import math

import pytest

from netstorm.geoserver.policy.tree import PolicyError
from netstorm.scheduler.awareness import LinkRates
from netstorm.scheduler.planning import compute_policy, predict_iteration_s
from netstorm.scheduler.trust import FIRST_ROUND, EstimateTrust
from netstorm.wan import load_topology

B, CHUNK = 50e6, 1 << 18
SCALE = 3.0        # rounds take 3x the model's time (compute, a smaller machine): calibrated


@pytest.fixture
def hetero6():
    topo = load_topology("hetero6")
    policy = compute_policy(topo, B, CHUNK).policy
    link = next((c, p) for t in policy.trees for c, p in t.parent.items() if p)
    return topo, policy, link


def adopted(records) -> bool:
    return any(r.get("trusted") for r in records)


def rounds(*seconds):
    """round -> first seen: round 1 opens with round 2 (asked a round ahead), round 2 is
    the warm-up (30 s), then rounds of the given lengths."""
    seen, t = {1: 0.0, 2: 0.0}, 30.0
    seen[3] = t
    for i, s in enumerate(seconds):
        t += s
        seen[4 + i] = t
    return seen


def test_a_slow_reading_while_rounds_keep_their_pace_is_not_trusted(hetero6):
    topo, policy, (a, b) = hetero6
    trust = EstimateTrust(topo.rates(), B, CHUNK)
    steady = SCALE * predict_iteration_s(policy, topo, B, CHUNK)
    slow = topo.with_rates({(a, b): 0.4 * topo.rate(a, b)})
    trust.on_rounds(rounds(steady, steady), lambda k: policy, topo)      # both agree
    log = trust.on_rounds(rounds(steady, steady, steady, steady), lambda k: policy, slow)
    assert not adopted(log) and [r["round"] for r in log] == [5, 6]
    assert trust.view(slow).rate(a, b) == topo.rate(a, b)
    assert trust.trusted == topo.rates()


def test_a_link_that_slows_the_rounds_down_is_trusted_after_one_round(hetero6):
    topo, policy, (a, b) = hetero6
    trust = EstimateTrust(topo.rates(), B, CHUNK)
    steady = SCALE * predict_iteration_s(policy, topo, B, CHUNK)
    slow = topo.with_rates({(a, b): 0.4 * topo.rate(a, b)})
    slower = SCALE * predict_iteration_s(policy, slow, B, CHUNK)
    assert slower > 1.3 * steady
    log = trust.on_rounds(rounds(steady, steady), lambda k: policy, topo)
    assert [r["round"] for r in log] == [3, 4]          # rounds 1 and 2 are start-up
    log += trust.on_rounds(rounds(steady, steady, slower), lambda k: policy, slow)
    assert adopted(log) and log[-1]["trusted"] and not adopted(log[:-1])
    assert trust.view(topo).rate(a, b) == pytest.approx(0.4 * topo.rate(a, b))


def test_rates_already_wrong_at_start_up_are_replaced_once_the_fresh_ones_explain_the_rounds(
        hetero6):
    """The WAN fluctuates from the start: the declared rates never agree with what is
    measured, and every round runs at the slow rates (a steady ratio under both series);
    only the fresh estimates predict the rounds near the model's own ratio."""
    topo, policy, (a, b) = hetero6
    trust = EstimateTrust(topo.rates(), B, CHUNK)
    slow = topo.scaled(0.3)
    real = 1.2 * predict_iteration_s(policy, slow, B, CHUNK)
    log = trust.on_rounds(rounds(real, real, 1.05 * real), lambda k: policy, slow)
    assert adopted(log)
    assert trust.trusted == pytest.approx(slow.rates())


def test_faster_readings_need_faster_rounds_too(hetero6):
    topo, policy, _ = hetero6
    trust = EstimateTrust(topo.rates(), B, CHUNK)
    steady = SCALE * predict_iteration_s(policy, topo, B, CHUNK)
    fast = topo.scaled(2.0)
    trust.on_rounds(rounds(steady, steady), lambda k: policy, topo)
    assert not adopted(trust.on_rounds(rounds(steady, steady, steady), lambda k: policy, fast))
    quick = SCALE * predict_iteration_s(policy, fast, B, CHUNK)
    assert adopted(trust.on_rounds(rounds(steady, steady, steady, quick),
                                   lambda k: policy, fast))


def test_a_policy_s_first_round_and_forgotten_policies_are_not_judged(hetero6):
    topo, policy, _ = hetero6
    newer = type(policy)(policy.version + 1, 4, policy.trees, policy.shares)
    trust = EstimateTrust(topo.rates(), B, CHUNK)

    def policy_for_round(k):
        if k == 5:
            raise PolicyError("forgotten")
        return newer if k >= 4 else policy
    log = trust.on_rounds(rounds(5.0, 5.0, 5.0, 5.0), policy_for_round, topo)
    assert [r["round"] for r in log] == [FIRST_ROUND, 6]
    assert trust.judged == 6


def test_stalled_directions_keep_their_stall_and_a_replaced_dc_is_forgotten(hetero6):
    topo, policy, (a, b) = hetero6
    rates = LinkRates(topo)
    rates.observe_stall(a, b, now=1.0)
    trust = EstimateTrust(topo.rates(), B, CHUNK)
    trust.on_rounds({}, lambda k: policy, rates.topology(), rates.stalled())
    view = trust.view(rates.topology(), rates.stalled())
    assert view.link(a, b) is None or view.rate(a, b) < 1.0
    trust.trusted[(a, b)] = 1.0
    trust.forget(a, topo.rates())
    assert trust.trusted[(a, b)] == topo.rate(a, b)


def test_a_round_that_outlasts_the_trusted_rates_makes_the_fresh_ones_trusted_at_once(hetero6):
    """Three rounds at the trusted pace, then one still running: at 1.05x its expected
    time nothing is decided; at 1.5x, with fresh estimates that predict 2x, they are
    trusted before the round ends (once: the round is not judged again). A slow reading
    alone, in a round on time, is not."""
    topo, policy, (a, b) = hetero6
    steady = SCALE * predict_iteration_s(policy, topo, B, CHUNK)
    slow = topo.with_rates({(a, b): 0.25 * topo.rate(a, b)})
    assert predict_iteration_s(policy, slow, B, CHUNK) > 2 * steady / SCALE
    trust = EstimateTrust(topo.rates(), B, CHUNK)
    seen = rounds(steady, steady, steady)            # round 6 in progress since seen[6]
    trust.on_rounds(seen, lambda k: policy, topo)
    assert trust._reference() == pytest.approx(math.log(SCALE))
    on_time = trust.on_rounds(seen, lambda k: policy, slow, now=seen[6] + 1.05 * steady)
    assert not adopted(on_time) and trust.trusted == topo.rates()
    late = trust.on_rounds(seen, lambda k: policy, slow, now=seen[6] + 1.5 * steady)
    assert adopted(late) and late[0]["round"] == 6 and late[0]["overdue_s"] > steady
    assert trust.trusted[(a, b)] == pytest.approx(0.25 * topo.rate(a, b))
    assert trust.on_rounds(seen, lambda k: policy, slow, now=seen[6] + 2 * steady) == []
