"""scheduler.trust: link estimates are acted on only once they explain the rounds."""
import pytest

from netstorm.geoserver.tree import PolicyError
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


def rounds(*seconds, start=1):
    """round -> first seen, for consecutive rounds of the given lengths."""
    seen, t = {start: 0.0}, 0.0
    for i, s in enumerate(seconds):
        t += s
        seen[start + i + 1] = t
    return seen


def test_a_slow_reading_while_rounds_keep_their_pace_is_not_trusted(hetero6):
    topo, policy, (a, b) = hetero6
    trust = EstimateTrust(topo.rates(), B, CHUNK)
    steady = SCALE * predict_iteration_s(policy, topo, B, CHUNK)
    slow = topo.with_rates({(a, b): 0.4 * topo.rate(a, b)})
    trust.on_rounds(rounds(30.0, 30.0, steady, steady), lambda k: policy, topo)   # calibrates
    assert not adopted(trust.on_rounds(rounds(30.0, 30.0, steady, steady, steady),
                                       lambda k: policy, slow))
    assert trust.view(slow).rate(a, b) == topo.rate(a, b)
    assert trust.trusted == topo.rates()


def test_a_link_that_slows_the_rounds_down_is_trusted_after_one_round(hetero6):
    topo, policy, (a, b) = hetero6
    trust = EstimateTrust(topo.rates(), B, CHUNK)
    steady = SCALE * predict_iteration_s(policy, topo, B, CHUNK)
    slow = topo.with_rates({(a, b): 0.4 * topo.rate(a, b)})
    slower = SCALE * predict_iteration_s(policy, slow, B, CHUNK)
    assert slower > 1.3 * steady
    log = trust.on_rounds(rounds(30.0, 30.0, steady, steady), lambda k: policy, topo)
    log += trust.on_rounds(rounds(30.0, 30.0, steady, steady, slower), lambda k: policy, slow)
    assert adopted(log)
    assert trust.view(topo).rate(a, b) == pytest.approx(0.4 * topo.rate(a, b))
    assert [r["round"] for r in log] == [2, 3, 4, 5]   # round 1 is start-up; 2, a warm-up
    assert "trusted" not in log[2] and log[-1]["trusted"] is True
    assert log[-1]["calibration"] == pytest.approx(SCALE)       # the warm-up is outvoted


def test_faster_readings_need_faster_rounds_too(hetero6):
    topo, policy, _ = hetero6
    trust = EstimateTrust(topo.rates(), B, CHUNK)
    steady = SCALE * predict_iteration_s(policy, topo, B, CHUNK)
    fast = topo.scaled(2.0)
    assert not adopted(trust.on_rounds(rounds(30.0, steady, steady, steady, steady),
                                       lambda k: policy, fast))
    quick = SCALE * predict_iteration_s(policy, fast, B, CHUNK)
    assert adopted(trust.on_rounds(rounds(30.0, steady, steady, steady, steady, quick),
                                   lambda k: policy, fast))


def test_a_policy_s_first_round_and_forgotten_policies_are_not_judged(hetero6):
    topo, policy, _ = hetero6
    newer = type(policy)(policy.version + 1, 3, policy.trees, policy.shares)
    trust = EstimateTrust(topo.rates(), B, CHUNK)

    def policy_for_round(k):
        if k == 4:
            raise PolicyError("forgotten")
        return newer if k >= 3 else policy
    log = trust.on_rounds(rounds(30.0, 5.0, 5.0, 5.0, 5.0), policy_for_round, topo)
    assert [r["round"] for r in log] == [FIRST_ROUND, 5]
    assert trust.judged == 5


def test_stalled_directions_keep_their_stall_and_a_replaced_dc_is_forgotten(hetero6):
    topo, policy, (a, b) = hetero6
    rates = LinkRates(topo)
    rates.observe_stall(a, b, now=1.0)
    trust = EstimateTrust(topo.rates(), B, CHUNK)
    trust.on_rounds({}, lambda k: policy, rates.topology(), rates.stalled())
    view = trust.view(rates.topology())
    assert view.link(a, b) is None or view.rate(a, b) < 1.0
    trust.trusted[(a, b)] = 1.0
    trust.forget(a, topo.rates())
    assert trust.trusted[(a, b)] == topo.rate(a, b)
