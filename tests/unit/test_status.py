"""scheduler/status.py: the status model the page, /status.json, netstorm-status and the
summary line show, fed as the scheduler feeds it (stats records, heartbeats, its state),
with an explicit clock."""
import json
import math
from dataclasses import replace
from types import SimpleNamespace

import pytest

from netstorm.geoserver.config.cluster import pseudo_cluster
from netstorm.geoserver.config.status import StatusConfig
from netstorm.geoserver.config.sync import SyncConfig
from netstorm.geoserver.policy.tree import Policy, Tree
from netstorm.scheduler import status as status_mod
from netstorm.scheduler.planning import cut_lower_bound
from netstorm.scheduler.status import (EVENTS, SUMMARY_S, ClusterStatus, SchedulerView,
                                       circle_layout, steps_per_round, tree_edges, view_of)
from netstorm.scheduler.topology import Link, Topology

START = 1000.0
DCS = ("dc0", "dc1", "dc2")
TOPOLOGY = Topology("t", DCS, (Link("dc0", "dc1", 100.0, 80.0), Link("dc1", "dc2", 50.0, 50.0),
                               Link("dc0", "dc2", 20.0, 20.0)))
# two trees: dc0 <- dc1 <- dc2 (shared, 70%); rooted at dc2, its total down a tree of its own
CHAIN = Tree("dc0", {"dc0": None, "dc1": "dc0", "dc2": "dc1"})
SPLIT = Tree("dc2", {"dc2": None, "dc1": "dc2", "dc0": "dc1"},
             down={"dc2": None, "dc0": "dc2", "dc1": "dc0"})
POLICY = Policy(1, 1, (CHAIN, SPLIT), (0.7, 0.3))


def cluster(**status):
    config = pseudo_cluster(3, 2, 9000)
    return replace(config, status=StatusConfig(**status)) if status else config


def training(config=None, **view) -> ClusterStatus:
    board = ClusterStatus(config or cluster(), START)
    board.view = SchedulerView(**{"policy": POLICY, "topology": TOPOLOGY, "workers": 6,
                                  **view})
    return board


def report_rounds(board, rounds_at, dcs=DCS, **meta):
    """Every DC reports round r at time t, for each (t, r)."""
    for t, r in rounds_at:
        for dc in dcs:
            board.on_report(dc, {"round": r, **meta}, START + t)


def test_a_fresh_status_says_starting_with_every_dc_placed_and_is_json():
    board = ClusterStatus(cluster(), START)
    snap = json.loads(board.json_bytes())
    assert snap["state"] == "starting" and snap["policy"] is None and snap["links"] == []
    assert [d["name"] for d in snap["dcs"]] == list(DCS)
    assert [(d["workers"], d["round"]) for d in snap["dcs"]] == [(2, 0)] * 3
    assert snap["rounds"]["round_s"] is None and snap["slowest_dc"] is None


def test_circle_layout_puts_the_first_dc_on_top_and_the_rest_clockwise_in_the_unit_square():
    layout = circle_layout(["a", "b", "c", "d"])
    assert layout["a"] == [0.5, 0.1] and layout["b"] == [0.9, 0.5]
    assert layout["c"] == [0.5, 0.9] and layout["d"] == [0.1, 0.5]
    assert circle_layout(["solo"]) == {"solo": [0.5, 0.5]}


def test_tree_edges_are_the_partial_sums_up_then_the_total_down_its_own_tree():
    assert tree_edges(CHAIN) == [("dc1", "dc0", "up"), ("dc2", "dc1", "up"),
                                 ("dc0", "dc1", "down"), ("dc1", "dc2", "down")]
    assert tree_edges(SPLIT) == [("dc0", "dc1", "up"), ("dc1", "dc2", "up"),
                                 ("dc2", "dc0", "down"), ("dc0", "dc1", "down")]


def test_links_carry_the_measured_rate_into_each_dc_the_planned_rate_and_the_trees_share():
    board = training()
    board.on_report("dc0", {"round": 3, "links": {"dc1": [91.5, 0.5], "dc2": [7.25, 2.0]}},
                    START + 10)
    board.on_report("dc1", {"round": 3, "links": {"dc0": [60.0, 1.0]}}, START + 10)
    links = {(l["src"], l["dst"]): l for l in board.snapshot(START + 11)["links"]}
    assert set(links) == set(TOPOLOGY.rates())          # every declared direction, once
    assert links[("dc1", "dc0")] == {"src": "dc1", "dst": "dc0", "measured_mbps": 91.5,
                                     "measured_age_s": 1.5, "planned_mbps": 80.0,
                                     "share": 0.7, "stalled": False}
    # dc0 -> dc1 carries the chain's total down (0.7), the split tree's partial sum and its
    # total (0.3 each): the model's fraction crossing it per round
    assert links[("dc0", "dc1")]["share"] == 1.3 and links[("dc0", "dc1")]["planned_mbps"] == 100
    assert links[("dc2", "dc0")]["share"] == 0.3 and links[("dc2", "dc0")]["measured_mbps"] == 7.25
    assert links[("dc0", "dc2")]["share"] == 0.0 and links[("dc0", "dc2")]["measured_mbps"] is None


def test_the_policy_in_force_is_shown_tree_by_tree_with_shares_and_edges():
    snap = training().snapshot(START)
    policy = snap["policy"]
    assert (policy["version"], policy["start_round"], policy["latest_version"]) == (1, 1, 1)
    assert [(t["root"], t["share"]) for t in policy["trees"]] == [("dc0", 0.7), ("dc2", 0.3)]
    assert policy["trees"][1]["edges"][2] == ["dc2", "dc0", "down"]
    json.dumps(snap, allow_nan=False)


def test_a_stalled_direction_is_marked_and_an_event_while_its_sender_reports_it():
    board = training()
    board.on_report("dc1", {"round": 2, "stalled": ["dc2"]}, START + 5)
    board.on_report("dc1", {"round": 2, "stalled": ["dc2"]}, START + 6)    # not news
    board.on_report("dc2", {"round": 2, "links": {"dc1": [40.0, 3.0]}}, START + 6)
    links = {(l["src"], l["dst"]): l for l in board.snapshot(START + 6)["links"]}
    assert links[("dc1", "dc2")]["stalled"]
    assert [(e["t"], e["kind"]) for e in board.events] == [(5.0, "stall")]
    assert board.events[0]["text"].startswith("link dc1->dc2 stalled: nothing moved")
    board.on_report("dc1", {"round": 3}, START + 7)              # it moves again
    links = {(l["src"], l["dst"]): l for l in board.snapshot(START + 7)["links"]}
    assert not links[("dc1", "dc2")]["stalled"]


def test_round_times_are_the_time_between_reported_rounds_and_the_rate_their_window():
    board = training()
    # round 1 at t=0 (start-up, not a point), then 2 rounds a second, then 1 round per 2 s
    report_rounds(board, [(0, 1), (1, 3), (2, 5), (4, 6)])
    assert list(board.history) == [(3, 0.5), (5, 0.5), (6, 2.0)]
    rounds = board.snapshot(START + 4)["rounds"]
    assert rounds["latest"] == 6 and rounds["completed"] == 5
    assert rounds["rate_per_s"] == pytest.approx(5 / 4) and rounds["round_s"] == 0.8
    assert rounds["history"] == [[3, 0.5], [5, 0.5], [6, 2.0]]
    # the window keeps the last RATE_WINDOW_S seconds only
    report_rounds(board, [(30, 8), (31, 10)])
    assert board.round_rate(START + 31) == pytest.approx(2.0)
    assert board.round_rate(START + 32) == pytest.approx(1.0)     # falls once rounds stop
    assert board.round_rate(START + 42) == 0.0


def test_a_chart_point_spans_at_least_point_s_so_beats_do_not_make_it_jagged():
    board = training()
    report_rounds(board, [(0, 1), (1, 5), (1.1, 6), (1.2, 7), (1.6, 9)])
    assert list(board.history) == [(5, 0.25), (9, 0.15)]      # 4 rounds in 0.6 s


def test_completed_rounds_are_those_every_dc_is_past():
    board = training()
    board.on_report("dc0", {"round": 9}, START + 1)
    board.on_report("dc1", {"round": 8}, START + 1)
    assert board.snapshot(START + 1)["rounds"]["completed"] == 0    # dc2 never reported
    board.on_report("dc2", {"round": 7}, START + 1)
    assert board.snapshot(START + 1)["rounds"]["completed"] == 6


def test_the_round_time_is_set_against_the_cut_bound_once_the_model_size_is_reported():
    board = training()
    report_rounds(board, [(0, 1), (1, 3)])
    rounds = board.snapshot(START + 1)["rounds"]
    assert rounds["bound_s"] is None and rounds["ratio"] is None       # no model size yet
    report_rounds(board, [(2, 5)], model_bytes=10**6)
    bound, _ = cut_lower_bound(TOPOLOGY, 10**6)
    snap = board.snapshot(START + 2)
    assert snap["rounds"]["bound_s"] == round(bound, 4)
    assert snap["rounds"]["ratio"] == round(0.5 / bound, 3)
    # both directions of every other DC's model share cross the WAN each round
    assert snap["wan_mb_per_s"] == round(2 * 2 * 10**6 * 2.0 / 1e6, 3)
    assert snap["model_bytes"] == 10**6


def test_the_bound_is_computed_again_only_when_the_rates_or_the_model_change(monkeypatch):
    calls = []
    monkeypatch.setattr(status_mod, "cut_lower_bound",
                        lambda topology, nbytes: calls.append(nbytes) or (1.0, set()))
    board = training()
    report_rounds(board, [(0, 1)], model_bytes=4000)
    for _ in range(3):
        board.snapshot(START)
    board.on_report("dc0", {"round": 1, "model_bytes": 8000}, START)
    board.snapshot(START)
    board.view = replace(board.view, topology=TOPOLOGY.scaled(0.5))
    board.snapshot(START)
    assert calls == [4000, 8000, 8000]


@pytest.mark.parametrize("sync, per_round", [
    (SyncConfig(), 1), (SyncConfig(mode="mixed"), 1), (SyncConfig(mode="hfa", k1=2, k2=3), 6),
    (SyncConfig(mode="diloco", h=50), 50), (SyncConfig(mode="esync"), None)])
def test_steps_per_round_follow_the_sync_mode(sync, per_round):
    assert steps_per_round(sync) == per_round


def test_progress_counts_steps_and_samples_and_an_eta_from_the_declared_total_steps():
    config = replace(cluster(total_steps=100, samples_per_step=64),
                     sync=SyncConfig(mode="hfa", k1=2, k2=1))
    board = training(config)
    report_rounds(board, [(0, 1), (2, 11)])          # 10 rounds in 2 s; 10 completed
    progress = board.snapshot(START + 2)["progress"]
    assert progress == {"rounds": 10, "steps": 20, "total_steps": 100, "samples": 1280,
                        "fraction": 0.2, "eta_s": round(40 / 5.0, 1)}


def test_without_declared_total_steps_there_is_no_eta_and_esync_counts_no_steps():
    board = training()
    report_rounds(board, [(0, 1), (1, 3)])
    progress = board.snapshot(START + 1)["progress"]
    assert progress["steps"] == 2 and progress["eta_s"] is None and progress["samples"] is None
    esync = training(replace(cluster(total_steps=10), sync=SyncConfig(mode="esync")))
    report_rounds(esync, [(0, 1), (1, 3)])
    progress = esync.snapshot(START + 1)["progress"]
    assert progress["steps"] is None and progress["eta_s"] is None


def test_the_slowest_dc_is_the_one_behind_the_leader_on_average_and_none_when_in_step():
    board = training()
    for r in range(1, 40):
        board.on_report("dc0", {"round": r + 1}, START + r)
        board.on_report("dc1", {"round": r + 1}, START + r)
        board.on_report("dc2", {"round": r}, START + r)
    slow = board.snapshot(START + 40)["slowest_dc"]
    assert slow["dc"] == "dc2" and "rounds behind" in slow["why"]
    in_step = training()
    report_rounds(in_step, [(r, r) for r in range(1, 40)])
    assert in_step.snapshot(START + 40)["slowest_dc"] is None


def test_under_esync_the_slowest_dc_is_the_one_with_the_most_seconds_per_step():
    board = training()
    board.on_report("dc0", {"round": 1, "step_s": 0.2}, START)
    board.on_report("dc1", {"round": 1, "step_s": 0.9}, START)
    assert board.snapshot(START)["slowest_dc"] == {"dc": "dc1", "why": "0.9 s per step"}


def test_policies_replans_recoveries_and_stalls_from_the_stats_records_become_events():
    board = training()
    downstream = []
    stats = board.stats_sink(downstream.append)
    records = [
        {"t": START + 1, "event": "policy", "reason": "initial", "version": 1,
         "start_round": 1, "trees": [{}, {}]},
        {"t": START + 2, "event": "rates", "round": 4, "rates": {}},
        {"t": START + 3, "event": "policy", "reason": "re-planned", "version": 2,
         "start_round": 9, "predicted_s": 0.25, "trees": [{}]},
        {"t": START + 4, "event": "replace", "dc": "dc1"},
        {"t": START + 5, "event": "replaced", "dc": "dc1", "round": 12},
        {"t": START + 6, "event": "stall", "message": "rank 1 (dc1/0) sent nothing for 40 s"},
        {"t": START + 7, "event": "repair", "dcs": ["dc2"]},
        {"t": START + 8, "event": "repaired", "dcs": ["dc2"], "seconds": 0.02}]
    for record in records:
        stats(record)
    assert downstream == records                       # the stats file still gets them all
    assert [(e["t"], e["kind"], e["text"]) for e in board.events] == [
        (1.0, "policy", "policy v1 (initial): 2 trees"),
        (3.0, "re-plan", "policy v2: 1 trees from round 9, predicted 0.25 s/round"),
        (4.0, "recovery", "dc1's server lost: replacing it"),
        (5.0, "recovery", "dc1's server replaced"),
        (6.0, "stall", "rank 1 (dc1/0) sent nothing for 40 s"),
        (7.0, "recovery", "dc2's replica differs from the majority's: replacing it"),
        (8.0, "recovery", "dc2's replica replaced from the majority's")]
    assert board.snapshot(START + 9)["policy"]["latest_version"] == 2


def test_only_the_last_events_are_kept():
    board = training()
    for i in range(EVENTS + 5):
        board.on_record({"t": START + i, "event": "replace", "dc": f"dc{i}"})
    assert len(board.events) == EVENTS and board.events[0]["text"].startswith("dc5's")


def test_the_state_follows_the_schedulers_view():
    board = training()
    assert board.snapshot(START)["state"] == "initializing"
    report_rounds(board, [(1, 1)])
    assert board.snapshot(START + 1)["state"] == "training"
    board.view = replace(board.view, recovering="dc1")
    assert board.snapshot(START + 1)["state"] == "recovering dc1"
    board.view = replace(board.view, recovering="", finished=6)
    assert board.snapshot(START + 1)["state"] == "finished"


def test_tick_publishes_at_most_once_a_second_and_a_summary_only_while_rounds_advance():
    board = ClusterStatus(cluster(), START)
    views = []

    def view():
        views.append(1)
        return SchedulerView(policy=POLICY, topology=TOPOLOGY, workers=6)
    assert board.tick(view, START) is None and len(views) == 1
    assert board.tick(view, START + 0.5) is None and len(views) == 1      # not due
    assert json.loads(board.json_bytes())["state"] == "initializing"
    report_rounds(board, [(SUMMARY_S - 1, 1), (SUMMARY_S, 3)], model_bytes=10**6)
    line = board.tick(view, START + SUMMARY_S)
    assert line.startswith("status: round 3, 2.00 rounds/s, DCs in step, WAN 8.0 MB/s, "
                           "round 0.5 s = ")
    assert "x the bound" in line
    assert board.tick(view, START + 2 * SUMMARY_S) is None        # no round since
    report_rounds(board, [(2 * SUMMARY_S + 1, 4)])
    assert board.tick(view, START + 2 * SUMMARY_S + 1).startswith("status: round 4")


def test_the_summary_line_says_an_unknown_bound_and_the_eta():
    board = training(cluster(total_steps=20))
    report_rounds(board, [(0, 1), (1, 3)])
    board._next_summary = START
    line = board.tick(lambda: board.view, START + 1)
    assert "round 0.5 s (bound unknown)" in line and "10% done, ETA 9 s" in line


def test_view_of_reads_the_policy_in_force_the_planning_rates_and_the_finished_workers():
    workers = [SimpleNamespace(id=i) for i in (4, 5, 6)]
    planned = TOPOLOGY.scaled(0.5)
    scheduler = SimpleNamespace(
        table=SimpleNamespace(workers=lambda: workers),
        rounds=SimpleNamespace(policy=POLICY, policy_in_force=lambda: POLICY),
        policies=SimpleNamespace(adaptation=SimpleNamespace(planning_topology=lambda: planned),
                                 wan_topology=TOPOLOGY),
        finished={4, 6, 99}, replacement=SimpleNamespace(lost_dc="dc2"))
    assert view_of(scheduler) == SchedulerView(policy=POLICY, topology=planned, workers=3,
                                               finished=2, recovering="dc2")
    scheduler.policies.adaptation, scheduler.replacement = None, None
    assert view_of(scheduler).topology is TOPOLOGY and view_of(scheduler).recovering == ""
    scheduler.table = None
    assert view_of(scheduler) == SchedulerView()


def test_the_snapshot_never_holds_a_non_finite_number():
    board = training()
    report_rounds(board, [(0, 1), (0, 2)])             # two rounds at one instant
    data = board.snapshot(START)
    json.dumps(data, allow_nan=False)
    assert all(math.isfinite(p[1]) for p in data["rounds"]["history"])
