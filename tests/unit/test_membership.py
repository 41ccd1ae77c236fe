"""scheduler/membership.py: which DCs are members, whether one may leave or join, the
policy over the members and the divisor of a round."""
import pytest

from netstorm.geoserver.config.cluster import pseudo_cluster
from netstorm.geoserver.config.links import Link
from netstorm.geoserver.policy.tree import Policy, PolicyError
from netstorm.scheduler.membership import Membership, MembershipError, member_policy
from netstorm.scheduler.topology import Topology

DCS = ("dc0", "dc1", "dc2")


def test_a_dc_leaves_while_min_dcs_remain_and_no_further():
    members = Membership(DCS, min_dcs=2)
    assert members.elastic and members.members == DCS
    assert members.leave("dc1", "was killed") == ("dc0", "dc2")
    assert members.departed == {"dc1": "was killed"}
    assert members.leave_refusal("dc2") == "only 1 DC(s) would remain, fewer than min_dcs = 2"
    with pytest.raises(MembershipError, match="dc2 was killed, and the run cannot go on "
                                              "without it: only 1 DC"):
        members.leave("dc2", "was killed")
    assert members.members == ("dc0", "dc2")
    assert "not a member" in members.leave_refusal("dc1")


def test_a_cluster_that_is_not_elastic_lets_no_dc_go_or_come():
    members = Membership(DCS, min_dcs=0)
    assert not members.elastic and members.min_dcs == 3
    assert "not elastic" in members.leave_refusal("dc0")
    members = Membership(DCS, min_dcs=3, members=("dc0", "dc1"))
    assert "not elastic" in members.join_refusal("dc2")


def test_a_dc_of_the_file_joins_in_file_order_once_and_a_departed_one_never_comes_back():
    members = Membership(DCS, min_dcs=1, members=("dc2", "dc0"))
    assert members.members == ("dc0", "dc2")
    assert members.join("dc1") == DCS
    assert members.join_refusal("dc1") == "dc1 is a member of the run already"
    assert "unknown DC 'mars'" in members.join_refusal("mars")
    members.leave("dc2", "left")
    with pytest.raises(MembershipError, match="dc2 cannot join: dc2 left the run"):
        members.join("dc2")
    with pytest.raises(MembershipError, match=r"unknown DC\(s\) \['x'\]"):
        Membership(DCS, 1, members=("x",))


def test_a_departed_dc_comes_back_while_rejoins_are_left():
    members = Membership(DCS, min_dcs=1, rejoins=1)
    assert members.may_come_back("dc2")
    members.leave("dc2", "was silent")
    members.leave("dc1", "was silent")
    assert members.join_refusal("dc2") == "" and members.join("dc2") == ("dc0", "dc2")
    assert members.departed == {"dc1": "was silent"} and members.rejoins_left == 0
    assert not members.may_come_back("dc0")
    assert "no rejoin is left ([elastic] rejoins)" in members.join_refusal("dc1")
    assert not Membership(DCS, min_dcs=0, rejoins=3).may_come_back("dc0")   # not elastic


def test_the_member_policy_is_a_star_at_the_hub_or_its_stand_in():
    config = pseudo_cluster(3, 1, 1)
    policy = member_policy(config, ("dc1", "dc0"), version=4, start_round=9)
    assert (policy.version, policy.start_round, policy.members) == (4, 9, ("dc0", "dc1"))
    assert policy.trees[0].root == "dc0"
    policy = member_policy(config, ("dc2", "dc1"), 5, 10)
    assert policy.trees[0].root == "dc1" and policy.members == ("dc1", "dc2")
    assert member_policy(config, ("dc2",), 6, 11).members == ("dc2",)
    with pytest.raises(MembershipError, match="no DC is left"):
        member_policy(config, (), 7, 12)


def test_fapt_plans_on_the_members_links_and_falls_back_to_a_star_if_they_are_cut_off():
    config = pseudo_cluster(3, 1, 1, policy="fapt")
    wan = Topology(name="t", dcs=DCS, links=(Link("dc0", "dc1", 100.0, 100.0),
                                             Link("dc1", "dc2", 50.0, 50.0)))
    policy = member_policy(config, ("dc1", "dc2"), 2, 3, wan)
    assert policy.members == ("dc1", "dc2") and len(policy.trees) >= 1
    assert abs(sum(policy.shares) - 1.0) < 1e-9
    cut = member_policy(config, ("dc0", "dc2"), 2, 3, wan)        # no dc0-dc2 link
    assert cut.members == ("dc0", "dc2") and cut.trees[0].root == "dc0"


def test_the_divisor_of_a_round_counts_the_workers_of_the_dcs_its_policy_spans():
    config = pseudo_cluster(3, 2, 1)
    per_dc = {"dc0": 2, "dc1": 2, "dc2": 3}
    assert member_policy(config, DCS, 1, 0).contributors(per_dc) == 7
    assert member_policy(config, ("dc0", "dc2"), 2, 5).contributors(per_dc) == 5


def test_an_elastic_server_takes_a_policy_over_some_of_its_dcs_and_no_stranger():
    data = member_policy(pseudo_cluster(3, 1, 1), ("dc0", "dc1"), 2, 5).to_json()
    with pytest.raises(PolicyError, match="cluster has"):
        Policy.from_json(data, DCS)                         # not elastic: every DC
    assert Policy.from_json(data, DCS, elastic=True).members == ("dc0", "dc1")
    with pytest.raises(PolicyError, match=r"not members of the cluster's DCs"):
        Policy.from_json(data, ("dc0", "dc2"), elastic=True)
