import pytest

from netstorm.geoserver.policy.tree import WHOLE_KEY_FRACTION, Policy, PolicyError, Tree

DCS = ["a", "b", "c", "d"]


def test_children_and_valid_tree():
    t = Tree("a", {"a": None, "b": "a", "c": "b", "d": "b"})
    t.validate(DCS)
    assert t.children("b") == ["c", "d"] and t.children("a") == ["b"] and t.children("c") == []


@pytest.mark.parametrize("parent,message", [
    ({"a": None, "b": "a", "c": "a"}, "spans"),                   # d missing
    ({"a": "b", "b": "a", "c": "a", "d": "a"}, "must have no aggregation parent"),
    ({"a": None, "b": "c", "c": "b", "d": "a"}, "does not reach root"),   # cycle
    ({"a": None, "b": "x", "c": "a", "d": "a"}, "does not reach root"),   # unknown parent
])
def test_invalid_trees_are_rejected(parent, message):
    with pytest.raises(PolicyError, match=message):
        Tree("a", parent).validate(DCS)


def test_a_split_tree_broadcasts_along_its_own_tree_and_is_validated_like_one():
    t = Tree("a", {"a": None, "b": "a", "c": "b", "d": "b"},
             down={"a": None, "d": "a", "c": "d", "b": "c"})
    t.validate(DCS)
    assert t.split and t.children("b") == ["c", "d"] and t.down_children("b") == []
    assert t.down_children("a") == ["d"] and t.down_parent["b"] == "c"
    shared = Tree("a", {"a": None, "b": "a", "c": "a", "d": "a"})
    assert not shared.split and shared.down_children("a") == ["b", "c", "d"]
    same = Tree("a", dict(shared.parent), down=dict(shared.parent))
    assert same == shared and not same.split and "down" not in same.to_json()
    with pytest.raises(PolicyError, match="does not reach root 'a' in the broadcast tree"):
        Tree("a", shared.parent, down={"a": None, "b": "c", "c": "b", "d": "a"}).validate(DCS)
    with pytest.raises(PolicyError, match="broadcast tree rooted at 'a' spans"):
        Tree("a", shared.parent, down={"a": None, "b": "a"}).validate(DCS)
    p = Policy(2, 0, (t, shared), shares=(0.4, 0.6))
    assert Policy.from_json(p.to_json(), DCS) == p
    bad = p.to_json()
    bad["trees"][0]["down"] = {"a": "b", "b": None, "c": "a", "d": "a"}
    with pytest.raises(PolicyError, match="no broadcast parent"):
        Policy.from_json(bad, DCS)


def test_policy_json_roundtrip_and_validation():
    p = Policy(3, 10, (Tree("a", {"a": None, "b": "a", "c": "a", "d": "c"}),
                       Tree("b", {"a": "b", "b": None, "c": "b", "d": "b"})))
    assert Policy.from_json(p.to_json(), DCS) == p
    with pytest.raises(PolicyError, match="malformed"):
        Policy.from_json({"version": 1}, DCS)
    with pytest.raises(PolicyError, match="no trees"):
        Policy.from_json({"version": 1, "start_round": 0, "trees": []}, DCS)


TWO = (Tree("a", {"a": None, "b": "a"}), Tree("b", {"a": "b", "b": None}))


@pytest.mark.parametrize("size,itemsize,chunk", [(1000, 4, 400), (10**6, 4, 1 << 20),
                                                  (7, 2, 1024), (12345, 8, 4096), (200, 4, 1024)])
def test_layout_covers_the_key_and_splits_large_keys_by_share(size, itemsize, chunk):
    p = Policy(1, 0, TWO, shares=(0.25, 0.75))
    layout = p.layout(3, size, itemsize, chunk)
    assert layout[0][0] == 0 and layout[-1][1] == size
    assert all(a[1] == b[0] for a, b in zip(layout, layout[1:]))
    assert all(0 < stop - start <= max(1, chunk // itemsize) for start, stop, _ in layout)
    assert layout == p.layout(3, size, itemsize, chunk)           # every DC agrees
    if size * itemsize > chunk // WHOLE_KEY_FRACTION:
        on_first = sum(stop - start for start, stop, t in layout if t == 0)
        assert abs(on_first - 0.25 * size) <= 1
    else:
        assert len({t for *_, t in layout}) == 1                # small keys travel whole


def test_small_keys_spread_over_trees_by_share():
    p = Policy(1, 0, TWO, shares=(0.2, 0.8))
    trees = [p.layout(k, 10, 4, 1024)[0][2] for k in range(2000)]
    assert 0.15 < trees.count(0) / 2000 < 0.25


def test_bad_shares_are_rejected():
    with pytest.raises(PolicyError, match="summing to 1"):
        Policy(1, 0, TWO, shares=(0.5, 0.6))
    with pytest.raises(PolicyError, match="summing to 1"):
        Policy(1, 0, TWO, shares=(1.0,))


def test_policy_book_picks_the_policy_in_force():
    from netstorm.geoserver.policy.tree import PolicyBook
    book = PolicyBook(Policy(1, 0, TWO))
    book.add(Policy(2, 10, TWO[:1]))
    book.add(Policy(3, 5, TWO[1:]))
    assert [book.for_round(r).version for r in (1, 4, 5, 9, 10, 99)] == [1, 1, 3, 3, 2, 2]
    with pytest.raises(PolicyError, match="announced twice"):
        book.add(Policy(2, 11, TWO[:1]))


def test_policy_book_forgets_only_versions_no_later_round_can_use():
    from netstorm.geoserver.policy.tree import PolicyBook
    book = PolicyBook(Policy(1, 0, TWO))
    for version, start in ((2, 3), (3, 5), (4, 5), (5, 8)):
        book.add(Policy(version, start, TWO))
    before = {r: book.for_round(r).version for r in range(5, 12)}
    book.drop_superseded(6)                 # in force at 6: version 4 (ties: higher version)
    assert sorted(book.by_version) == [4, 5]
    assert {r: book.for_round(r).version for r in range(5, 12)} == before


def test_children_from_spreads_from_any_dc_over_tree_links_once():
    # dc0 - dc1 - dc2 - dc3 with dc4 under dc1, rooted at dc2
    tree = Tree("dc2", {"dc2": None, "dc1": "dc2", "dc3": "dc2", "dc0": "dc1", "dc4": "dc1"})
    for origin in tree.parent:
        got, reached, frontier = {}, {origin}, [origin]
        while frontier:
            dc = frontier.pop()
            got[dc] = tree.children_from(origin, dc)
            for child in got[dc]:
                assert child not in reached             # each DC is reached once
                reached.add(child)
                frontier.append(child)
        assert reached == set(tree.parent)
    assert tree.children_from("dc0", "dc0") == ["dc1"]
    assert tree.children_from("dc0", "dc1") == ["dc2", "dc4"]
    assert tree.children_from("dc0", "dc3") == []
    with pytest.raises(PolicyError):
        tree.children_from("mars", "dc0")


def test_a_replay_policy_is_in_force_from_its_start_whatever_was_announced_later():
    from netstorm.geoserver.policy.tree import PolicyBook
    book = PolicyBook(Policy(1, 0, TWO))
    book.add(Policy(2, 9, TWO[:1]))                 # announced, not yet in force
    book.replay(Policy(3, 7, TWO[1:]))              # a lost server: rounds from 7 replayed
    assert sorted(book.by_version) == [1, 3]
    assert [book.for_round(r).version for r in (6, 7, 9, 50)] == [1, 3, 3, 3]
    with pytest.raises(PolicyError, match="not newer than every known version"):
        book.replay(Policy(2, 8, TWO))


def test_initial_values_spread_along_the_widest_paths_out_of_their_origin():
    """a -> c directly is slow (10), through b fast (100 and 80): c gets it from b; every
    DC gets it once, from one parent; the reverse rates do not matter."""
    from netstorm.geoserver.policy.tree import widest_children
    links = [("a", "b", 100, 1), ("b", "c", 80, 1), ("a", "c", 10, 500), ("c", "d", 5, 5)]
    children = {dc: widest_children("a", dc, links) for dc in "abcd"}
    assert children == {"a": ["b"], "b": ["c"], "c": ["d"], "d": []}
    from_c = {dc: widest_children("c", dc, links) for dc in "abcd"}
    assert from_c == {"a": ["b"], "b": [], "c": ["a", "d"], "d": []}
    assert widest_children("x", "a", links) == [] and widest_children("a", "x", links) == []
