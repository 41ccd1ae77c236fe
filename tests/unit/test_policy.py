import pytest

from netstorm.scheduler.policy import star_policy


def test_star_is_one_tree_rooted_at_the_hub():
    p = star_policy(["x", "y", "z"], "y")
    (tree,) = p.trees
    assert tree.root == "y" and tree.parent == {"x": "y", "y": None, "z": "y"}
    tree.validate(["x", "y", "z"])


def test_star_hub_must_be_a_dc():
    with pytest.raises(ValueError, match="hub 'q'"):
        star_policy(["x", "y"], "q")


def _config(links=(), policy="fapt"):
    from netstorm.geoserver.config.cluster import ClusterConfig, DataCenter, Link
    return ClusterConfig("127.0.0.1", 1, tuple(DataCenter(n, "127.0.0.1", 0, 1)
                                               for n in ("a", "b", "c")),
                         policy=policy, links=tuple(Link(*l) for l in links))


def test_fapt_needs_measurement_only_without_declared_links():
    from netstorm.scheduler.policy import needs_measurement
    assert needs_measurement(_config())
    assert not needs_measurement(_config([("a", "b", 1.0, 1.0), ("b", "c", 1.0, 1.0)]))
    assert not needs_measurement(_config(policy="star"))


def test_initial_policy_from_declared_or_measured_rates_spans_the_dcs():
    from netstorm.scheduler.policy import initial_policy
    declared = _config([("a", "b", 40.0, 40.0), ("b", "c", 100.0, 100.0),
                        ("a", "c", 10.0, 10.0)])
    policy, text = initial_policy(declared)
    assert abs(sum(policy.shares) - 1) < 1e-9 and "fapt" in text
    for tree in policy.trees:
        tree.validate(["a", "b", "c"])
        assert {frozenset((c, p)) for c, p in tree.parent.items() if p} <= {
            frozenset("ab"), frozenset("bc"), frozenset("ac")}
    measured = {("a", "b"): 40, ("b", "a"): 40, ("b", "c"): 100, ("c", "b"): 100,
                ("a", "c"): 0.0, ("c", "a"): 5.0}          # a<->c unusable: left out
    policy, _ = initial_policy(_config(), measured=measured)
    for tree in policy.trees:
        assert frozenset("ac") not in {frozenset((c, p)) for c, p in tree.parent.items() if p}


def test_unusable_measurement_is_a_clear_error():
    from netstorm.scheduler.policy import initial_policy
    with pytest.raises(ValueError, match="measured WAN is unusable"):
        initial_policy(_config(), measured={("a", "b"): 10, ("b", "a"): 10})
