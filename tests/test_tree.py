import pytest

from geoserver.tree import Policy, PolicyError, Tree

DCS = ["a", "b", "c", "d"]


def test_children_and_valid_tree():
    t = Tree("a", {"a": None, "b": "a", "c": "b", "d": "b"})
    t.validate(DCS)
    assert t.children("b") == ["c", "d"] and t.children("a") == ["b"] and t.children("c") == []


@pytest.mark.parametrize("parent,message", [
    ({"a": None, "b": "a", "c": "a"}, "spans"),                   # d missing
    ({"a": "b", "b": "a", "c": "a", "d": "a"}, "must have no parent"),
    ({"a": None, "b": "c", "c": "b", "d": "a"}, "does not reach root"),   # cycle
    ({"a": None, "b": "x", "c": "a", "d": "a"}, "does not reach root"),   # unknown parent
])
def test_invalid_trees_are_rejected(parent, message):
    with pytest.raises(PolicyError, match=message):
        Tree("a", parent).validate(DCS)


def test_policy_json_roundtrip_and_validation():
    p = Policy(3, 10, (Tree("a", {"a": None, "b": "a", "c": "a", "d": "c"}),
                       Tree("b", {"a": "b", "b": None, "c": "b", "d": "b"})))
    assert Policy.from_json(p.to_json(), DCS) == p
    with pytest.raises(PolicyError, match="malformed"):
        Policy.from_json({"version": 1}, DCS)
    with pytest.raises(PolicyError, match="no trees"):
        Policy.from_json({"version": 1, "start_round": 0, "trees": []}, DCS)


def test_every_chunk_gets_a_tree_deterministically():
    p = Policy(1, 0, (Tree("a", {"a": None, "b": "a"}), Tree("b", {"a": "b", "b": None})))
    roots = [p.tree_for(k, c).root for k in range(3) for c in range(3)]
    assert set(roots) == {"a", "b"}
    assert roots == [p.tree_for(k, c).root for k in range(3) for c in range(3)]
