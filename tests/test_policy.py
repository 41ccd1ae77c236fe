import pytest

from scheduler.policy import star_policy


def test_star_is_one_tree_rooted_at_the_hub():
    p = star_policy(["x", "y", "z"], "y")
    (tree,) = p.trees
    assert tree.root == "y" and tree.parent == {"x": "y", "y": None, "z": "y"}
    tree.validate(["x", "y", "z"])


def test_star_hub_must_be_a_dc():
    with pytest.raises(ValueError, match="hub 'q'"):
        star_policy(["x", "y"], "q")
