"""netstorm/launcher/status_table.py: netstorm-status's tables, rendered from snapshots the
scheduler's status model (scheduler/status.py) builds, so the two cannot drift apart."""
import json
from dataclasses import replace

import pytest

from netstorm.geoserver.config.cluster import pseudo_cluster
from netstorm.geoserver.config.status import StatusConfig
from netstorm.geoserver.policy.tree import Policy, Tree
from netstorm.launcher.status_table import (SNAPSHOT_VERSION, check_snapshot, duration, render,
                                            table)
from netstorm.scheduler import status as status_mod
from netstorm.scheduler.status import ClusterStatus, SchedulerView
from netstorm.scheduler.topology import Link, Topology

START = 50.0
URL = "http://127.0.0.1:8080/status.json"
TOPOLOGY = Topology("t", ("dc0", "dc1"), (Link("dc0", "dc1", 100.0, 40.0),))
POLICY = Policy(2, 5, (Tree("dc0", {"dc0": None, "dc1": "dc0"}),
                       Tree("dc1", {"dc1": None, "dc0": "dc1"})), (0.75, 0.25))


def snapshot(total_steps=0, model_bytes=0, events=True) -> dict:
    config = replace(pseudo_cluster(2, 1, 9000),
                     status=StatusConfig(total_steps=total_steps, samples_per_step=32))
    board = ClusterStatus(config, START)
    board.view = SchedulerView(policy=POLICY, topology=TOPOLOGY, workers=2, finished=1)
    for t, r in ((0, 1), (1, 5), (2, 9)):
        for dc in ("dc0", "dc1"):
            meta = {"round": r, "links": {"dc1" if dc == "dc0" else "dc0": [33.25, 0.5]}}
            board.on_report(dc, {**meta, "model_bytes": model_bytes} if model_bytes else meta,
                            START + t)
    if events:
        board.on_record({"t": START + 1, "event": "policy", "reason": "initial", "version": 1,
                         "trees": [{}]})
        board.on_record({"t": START + 2, "event": "replace", "dc": "dc1"})
    return json.loads(json.dumps(board.snapshot(START + 2)))   # as the wire has it


def test_the_table_shows_state_rounds_progress_and_the_slowest_dc():
    text = render(snapshot(total_steps=100), URL)
    lines = text.splitlines()
    assert lines[0] == f"netstorm cluster at {URL}: training, up 2 s, 2 DCs, sync fsa"
    assert lines[1] == ("rounds: 8 completed (4/s); round 0.25 s (cut bound unknown: model "
                        "size not reported)")
    assert lines[2] == "progress: 8 steps of 100 (8%), 256 samples, ETA 23 s"
    assert lines[3] == "slowest DC: none, every DC keeps pace"
    assert lines[4] == "workers: 1 of 2 finished"


def test_the_table_sets_the_round_time_against_the_bound_once_the_model_size_is_known():
    text = render(snapshot(model_bytes=10**6), URL)
    rounds = text.splitlines()[1]
    assert "x the cut bound 0.2 s" in rounds and "WAN 8 MB/s" in rounds
    assert "(no ETA: [status] total_steps not declared)" in text


def test_one_row_per_dc_and_per_link_with_measured_and_planned_rates():
    lines = render(snapshot(), URL).splitlines()
    header = lines.index("DC   ROUND  WORKERS  BEHIND")
    assert lines[header + 1:header + 3] == ["dc0      9        1    0.00",
                                            "dc1      9        1    0.00"]
    links = [l for l in lines if "->" in l and "root" not in l]
    # every byte crosses both directions between two DCs: 100% of the model each way
    assert [l.split() for l in links] == [["dc0", "->", "dc1", "33.25", "100", "100%", "0.5", "s"],
                                          ["dc1", "->", "dc0", "33.25", "40", "100%", "0.5", "s"]]


def test_the_trees_in_force_and_the_last_events_newest_first():
    lines = render(snapshot(), URL).splitlines()
    at = lines.index("TREES: policy v2 in force from round 5")
    assert lines[at + 1:at + 3] == ["  root dc0 75%: up dc1->dc0; down dc0->dc1",
                                    "  root dc1 25%: up dc0->dc1; down dc1->dc0"]
    at = lines.index("EVENTS")
    assert lines[at + 1].split() == ["2.0", "s", "recovery", "dc1's", "server", "lost:",
                                     "replacing", "it"]
    assert lines[at + 2].split()[:3] == ["1.0", "s", "policy"]
    assert "EVENTS: none yet" in render(snapshot(events=False), URL)


def test_a_snapshot_of_another_version_or_shape_is_named_not_rendered():
    good = snapshot()
    assert check_snapshot(good) == ""
    assert check_snapshot([1, 2]) == "the answer is not a JSON object"
    assert check_snapshot({k: v for k, v in good.items() if k != "links"}) == \
        "the answer lacks links"
    assert "status version 99" in check_snapshot({**good, "version": 99})
    assert SNAPSHOT_VERSION == status_mod.SNAPSHOT_VERSION


@pytest.mark.parametrize("seconds, text", [(None, "-"), (42.4, "42 s"), (200, "3 min 20 s"),
                                           (3725, "1 h 2 min")])
def test_durations_read_as_a_person_says_them(seconds, text):
    assert duration(seconds) == text


def test_table_columns_are_as_wide_as_their_widest_cell():
    assert table(["A", "NUM"], [["long name", 1], ["x", 22]], right={1}) == \
        ["A          NUM", "long name    1", "x           22"]
