"""netstorm.scheduler.planning.roots: every tree rooted where its pipeline fill is least."""
from netstorm.scheduler.planning import best_root
from planning_cases import topo, tree


def test_best_root_is_the_centre_and_ties_go_to_the_lower_index():
    line5 = topo("abcde", ("a", "b", 50), ("b", "c", 50), ("c", "d", 50), ("d", "e", 50))
    assert best_root(tree("a", b="a", c="b", d="c", e="d"), line5).root == "c"
    line4 = topo("abcd", ("a", "b", 50), ("b", "c", 50), ("c", "d", 50))
    rooted = best_root(tree("d", c="d", b="c", a="b"), line4)
    assert rooted.root == "b" and rooted.parent == {"a": "b", "b": None, "c": "b", "d": "c"}
    slow_end = topo("abcd", ("a", "b", 5), ("b", "c", 50), ("c", "d", 50))
    assert best_root(tree("d", c="d", b="c", a="b"), slow_end).root == "b"
