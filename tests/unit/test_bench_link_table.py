"""netstorm.bench.link_table: per-link bytes, busy time and achieved rate, by hand."""
import pytest

from netstorm.bench.link_table import (BUSY_FRACTION, assigned_bytes, link_table,
                                       measured_links, summary)
from netstorm.bench.report import fapt_plan
from netstorm.scheduler.planning import link_loads
from netstorm.geoserver.policy.tree import Tree
from netstorm.wan import load_topology

MB = 10 ** 6
AB, BA = ("a", "b"), ("b", "a")


def _samples(per_interval: list, rate=8.0, dt=0.1, link=AB):
    """Cumulative samples every ``dt`` s of ``link`` sending ``per_interval[i]`` bytes in
    interval i, at ``rate`` Mbit/s (8 Mbit/s = 1 MB/s: 100 kB per full interval)."""
    out, total = [(0.0, {link: 0}, {link: rate})], 0
    for i, moved in enumerate(per_interval):
        total += moved
        out.append((round((i + 1) * dt, 6), {link: total}, {link: rate}))
    return out


def test_assigned_bytes_put_each_share_up_the_aggregation_and_down_the_broadcast_edges():
    trees = [{"root": "a", "parent": {"a": None, "b": "a", "c": "b"}, "share": 0.75},
             {"root": "c", "parent": {"a": "c", "b": "c", "c": None},
              "down": {"a": "b", "b": "c", "c": None}, "share": 0.25}]
    got = assigned_bytes(trees, 100.0)
    # tree 1 up b->a, c->b and down a->b, b->c; tree 2 up a->c, b->c and down c->b, b->a
    assert got == {("b", "a"): 75.0 + 25.0, ("c", "b"): 75.0 + 25.0, ("a", "b"): 75.0,
                   ("b", "c"): 75.0 + 25.0, ("a", "c"): 25.0}


def test_assigned_bytes_agree_with_the_time_models_busiest_link_term():
    topology = load_topology("paper9").scaled(0.5).without_latency()
    plan = fapt_plan(topology, 46758048)
    assigned = assigned_bytes(plan["trees"], 46758048)
    pairs = [(Tree(t["root"], t["parent"], t.get("down")), t["share"]) for t in plan["trees"]]
    for link, seconds in link_loads(pairs, topology, 46758048).items():
        busy = assigned.get(link, 0.0) * 8 / (topology.rate(*link) * 1e6)
        assert busy == pytest.approx(seconds, rel=1e-3, abs=1e-9)


def test_a_saturated_link_is_busy_throughout_at_its_rate():
    samples = _samples([100_000] * 20)          # 2 s at exactly 1 MB/s
    rows = link_table(samples, [0.0, 1.0], 2.0, {AB: 900_000.0})
    (row,) = rows
    assert row["bytes_per_iter"] == 1_000_000 and row["carried_vs_assigned"] == 1.1111
    assert row["busy_s_per_iter"] == 1.0 and row["utilization"] == 1.0
    assert row["achieved_mbps"] == 8.0 and row["efficiency"] == 1.0
    assert row["model_busy_s"] == 0.9
    assert row["first_busy_s"] == 0.0 and row["idle_tail_s"] == 0.0


def test_busy_time_leaves_out_a_trickle_and_finds_the_fill_and_the_tail():
    trickle = int(BUSY_FRACTION * 100_000) - 1          # ACKs: below the busy threshold
    # each 1 s iteration: 0.2 s of trickle, 0.5 s at 80% of the rate, 0.3 s idle
    one = [trickle] * 2 + [80_000] * 5 + [0] * 3
    rows = link_table(_samples(one * 2), [0.0, 1.0], 2.0)
    (row,) = rows
    assert row["busy_s_per_iter"] == 0.5 and row["utilization"] == 0.5
    assert row["efficiency"] == 0.8 and row["achieved_mbps"] == 6.4
    assert row["first_busy_s"] == 0.2 and row["idle_tail_s"] == 0.3
    assert row["bytes_per_iter"] == 2 * trickle + 400_000
    assert row["assigned_bytes_per_iter"] is None and row["carried_vs_assigned"] is None


def test_the_window_is_interpolated_between_samples_and_rows_are_busiest_first():
    samples = [(0.0, {AB: 0, BA: 0}, {AB: 8.0, BA: 8.0}),
               (1.0, {AB: 1_000_000, BA: 0}, {AB: 8.0, BA: 8.0}),
               (2.0, {AB: 2_000_000, BA: 500_000}, {AB: 8.0, BA: 8.0})]
    rows = link_table(samples, [0.5], 1.5, {BA: 100.0, ("c", "d"): 0.0})
    assert [r["link"] for r in rows] == ["a->b", "b->a"]
    assert rows[0]["bytes_per_iter"] == 1_000_000 and rows[0]["busy_s_per_iter"] == 1.0
    assert rows[1]["bytes_per_iter"] == 250_000 and rows[1]["busy_s_per_iter"] == 0.5


def test_rates_come_from_the_argument_when_samples_carry_none_and_bad_windows_give_nothing():
    samples = [(t, {AB: int(t * 1e6)}, None) for t in (0.0, 1.0, 2.0)]
    (row,) = link_table(samples, [0.0], 2.0, rates={AB: 8.0})
    assert row["efficiency"] == 1.0 and row["mbps"] == 8.0
    assert link_table(samples[:1], [0.0], 2.0) == []
    assert link_table(samples, [1.0], 1.0) == []


def test_measured_links_skip_the_warm_up_and_summary_names_the_figures():
    samples = _samples([100_000] * 30)
    result = {"_iter_start": [0.0, 1.0, 2.0], "_iter_all_s": [1.0, 1.0, 1.0]}
    plan = {"trees": [{"root": "b", "parent": {"a": "b", "b": None}, "share": 1.0}]}
    rows = measured_links(samples, result, plan, 500_000)
    assert rows[0]["bytes_per_iter"] == 1_000_000 and rows[0]["carried_vs_assigned"] == 2.0
    assert measured_links(samples, {}, plan, 1) == []
    text = summary(rows)
    assert "a->b (8 Mbit/s)" in text and "2.000x the model's 0.5 MB (0.50 s)" in text
    assert "busy 1.00 s/iter at 8.0 Mbit/s = 100% of its rate" in text
    assert "none assigned" in summary(measured_links(samples, result, None, 1))


def test_fapt_plan_predicts_with_framing_and_keeps_the_payload_figure():
    from netstorm.scheduler.planning import TCP_GOODPUT
    topology = load_topology("paper9").scaled(0.5).without_latency()
    plan = fapt_plan(topology, 46758048)
    assert plan["payload_predicted_s"] == pytest.approx(7.4412, abs=1e-3)
    assert plan["predicted_s"] == pytest.approx(plan["payload_predicted_s"] / TCP_GOODPUT,
                                                abs=1e-3)
