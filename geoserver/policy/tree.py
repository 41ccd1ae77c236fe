"""A WAN synchronization policy as data: aggregation trees over DCs and which chunk uses which.

The scheduler computes a :class:`Policy` (see ``netstorm.scheduler.policy``) and sends it as
JSON; the global servers only follow it. A tree aggregates towards ``root``: every DC forwards
the sum of its own contribution and its children's partial sums to ``parent[dc]``; the root
completes the sum and sends the same bytes back down, along the same tree (a *shared* tree)
or along a tree of its own (a *split* tree: ``down[dc]`` is the DC that passes ``dc`` the
total), so that each direction of a link can be planned against its own rate.
"""
from __future__ import annotations

from dataclasses import dataclass

from .chunking import chunk_ranges

__all__ = ["Policy", "PolicyBook", "PolicyError", "Tree", "WHOLE_KEY_FRACTION", "widest_children"]


WHOLE_KEY_FRACTION = 4     # keys up to chunk_bytes / this travel whole on one tree


class PolicyError(ValueError):
    """A policy that is not a set of spanning trees over the cluster's DCs."""


def _check_spanning(parent: dict, root: str, dcs: set, what: str) -> None:
    if set(parent) != dcs:
        raise PolicyError(f"{what} tree rooted at {root!r} spans {sorted(parent)}, "
                          f"cluster has {sorted(dcs)}")
    if parent.get(root, "x") is not None:
        raise PolicyError(f"root {root!r} must have no {what} parent")
    for dc in dcs:
        seen, node = set(), dc
        while node is not None:
            if node in seen or node not in dcs:
                raise PolicyError(f"DC {dc!r} does not reach root {root!r} in the {what} tree")
            seen.add(node)
            node = parent[node]


@dataclass(frozen=True)
class Tree:
    """``parent``: the aggregation tree, dc -> the DC it sends its partial sum to (None at
    the root). ``down``: the broadcast tree, dc -> the DC it receives the total from (None
    at the root); omitted (None) when the total descends ``parent``'s edges."""
    root: str
    parent: dict
    down: dict = None

    def __post_init__(self):
        if self.down is not None and self.down == self.parent:
            object.__setattr__(self, "down", None)        # one way to say "shared"
        # every chunk asks for a DC's children: found once per tree, not once per chunk
        object.__setattr__(self, "_children", _children_of(self.parent))
        object.__setattr__(self, "_down_children", _children_of(self.down_parent))

    @property
    def split(self) -> bool:
        """Whether the total descends a tree of its own."""
        return self.down is not None

    @property
    def down_parent(self) -> dict:
        """dc -> the DC it receives the total from (None at the root)."""
        return self.parent if self.down is None else self.down

    def children(self, dc: str) -> list:
        """The DCs that send ``dc`` their partial sums, sorted. O(children)."""
        return list(self._children.get(dc, ()))

    def down_children(self, dc: str) -> list:
        """The DCs ``dc`` passes the total to, sorted. O(children)."""
        return list(self._down_children.get(dc, ()))

    def children_from(self, origin: str, dc: str) -> list:
        """``dc``'s children when the tree's links, taken undirected, carry something from
        ``origin`` to every DC (each DC gets it once, over tree links only). O(n)."""
        if origin not in self.parent or dc not in self.parent:
            raise PolicyError(f"{origin!r} or {dc!r} is not in this tree")
        neighbours = {d: set() for d in self.parent}
        for child, parent in self.parent.items():
            if parent is not None:
                neighbours[child].add(parent)
                neighbours[parent].add(child)
        towards_origin, frontier = {origin: None}, [origin]
        while frontier:
            nxt = []
            for d in frontier:
                for n in neighbours[d]:
                    if n not in towards_origin:
                        towards_origin[n] = d
                        nxt.append(n)
            frontier = nxt
        return sorted(n for n in neighbours[dc] if towards_origin.get(n) == dc)

    def validate(self, dcs) -> None:
        """Raise :class:`PolicyError` unless ``parent`` (and ``down``, if given) is a
        spanning tree of ``dcs`` rooted at root. O(n^2) at worst."""
        dcs = set(dcs)
        _check_spanning(self.parent, self.root, dcs, "aggregation")
        if self.down is not None:
            _check_spanning(self.down, self.root, dcs, "broadcast")

    def to_json(self) -> dict:
        out = {"root": self.root, "parent": self.parent}
        return out if self.down is None else {**out, "down": self.down}


def _children_of(parent: dict) -> dict:
    """dc -> its children under ``parent`` (sorted), for the DCs that have any. O(n log n)."""
    out: dict = {}
    for child, up in sorted(parent.items()):
        if up is not None:
            out.setdefault(up, []).append(child)
    return {dc: tuple(kids) for dc, kids in out.items()}


def _names(parent: dict) -> dict:
    return {str(k): (None if v is None else str(v)) for k, v in parent.items()}


@dataclass(frozen=True)
class Policy:
    """Trees, each aggregating a share of the model, in force from round ``start_round`` on.

    :meth:`layout` cuts a key into WAN chunks and says which tree carries each; it depends
    only on the policy and the key's size, so every DC computes the same layout without
    talking to the others.
    """

    version: int
    start_round: int
    trees: tuple
    shares: tuple = ()      # fraction of the model per tree; empty: equal shares

    def __post_init__(self):
        if not self.trees:
            raise PolicyError("policy has no trees")
        if len(self.trees) > 255:
            raise PolicyError(f"{len(self.trees)} trees; at most 255")
        shares = self.shares or (1.0 / len(self.trees),) * len(self.trees)
        if len(shares) != len(self.trees) or any(not (x >= 0) for x in shares) \
                or abs(sum(shares) - 1.0) > 1e-6:
            raise PolicyError(f"shares {shares} must be {len(self.trees)} non-negative "
                              f"numbers summing to 1")
        object.__setattr__(self, "shares", tuple(float(x) for x in shares))

    def _small_key_tree(self, key: int) -> int:
        """A whole small key goes to one tree: weighted by share, spread by key id."""
        u = ((key * 2654435761) % 4294967296) / 4294967296.0     # Knuth multiplicative hash
        acc = 0.0
        for index, share in enumerate(self.shares):
            acc += share
            if u < acc:
                return index
        return max(range(len(self.shares)), key=lambda i: self.shares[i])

    def layout(self, key: int, size: int, itemsize: int, chunk_bytes: int) -> list:
        """``[(start, stop, tree_index), ...]`` covering ``size`` elements of ``key``.

        Keys of at most ``chunk_bytes`` / :data:`WHOLE_KEY_FRACTION` bytes travel whole on
        one tree; larger keys are split between the trees in proportion to their shares
        and each part is cut into chunks of at most ``chunk_bytes`` (so the bytes each tree
        carries follow its share closely: whole keys of up to a chunk put 8% more than
        planned on resnet18's busiest tree). O(size·itemsize / chunk_bytes + trees)."""
        if size * itemsize <= chunk_bytes // WHOLE_KEY_FRACTION or len(self.trees) == 1:
            tree = self._small_key_tree(key) if len(self.trees) > 1 else 0
            return [(a, b, tree) for a, b in chunk_ranges(size, itemsize, chunk_bytes)]
        out, start, acc = [], 0, 0.0
        for index, share in enumerate(self.shares):
            acc += share
            stop = size if index == len(self.shares) - 1 else int(round(acc * size))
            if stop > start:
                out += [(start + a, start + b, index)
                        for a, b in chunk_ranges(stop - start, itemsize, chunk_bytes)]
            start = max(start, stop)
        return out

    def to_json(self) -> dict:
        return {"version": self.version, "start_round": self.start_round,
                "trees": [t.to_json() for t in self.trees],
                "shares": list(self.shares)}

    @property
    def members(self) -> tuple:
        """The DCs this policy's trees span (sorted): an elastic cluster's members while it
        is in force (docs/recovery-elastic.md). O(n log n)."""
        return tuple(sorted(self.trees[0].parent)) if self.trees else ()

    def contributors(self, workers_per_dc: dict) -> int:
        """How many workers a round summed under this policy comes from: the workers of the
        DCs it spans (``workers_per_dc``: dc -> count). The divisor of the averaging modes
        (hfa, diloco); every DC reads it from the same policy, so replicas stay
        bit-identical. O(members log members)."""
        return sum(int(workers_per_dc.get(dc, 0)) for dc in self.members)

    @classmethod
    def from_json(cls, data: dict, dcs, elastic: bool = False) -> "Policy":
        """A policy received; its trees must span ``dcs`` or, with ``elastic``, the same
        non-empty subset of them (the members, docs/recovery-elastic.md)."""
        try:
            trees = tuple(Tree(root=str(t["root"]), parent=_names(t["parent"]),
                               down=None if t.get("down") is None else _names(t["down"]))
                          for t in data["trees"])
            policy = cls(version=int(data["version"]), start_round=int(data["start_round"]),
                         trees=trees, shares=tuple(float(x) for x in data.get("shares", ())))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            if isinstance(exc, PolicyError):
                raise
            raise PolicyError(f"malformed policy: {exc!r}") from exc
        if elastic and trees:
            spanned = set(trees[0].parent)
            if not spanned or not spanned <= set(dcs):
                raise PolicyError(f"policy spans {sorted(spanned)}, not members of the "
                                  f"cluster's DCs {sorted(dcs)}")
            dcs = spanned
        for tree in trees:
            tree.validate(dcs)
        return policy


class PolicyBook:
    """The policies a node knows, by version; which one applies to a round.

    The scheduler sends a policy ahead of its ``start_round``; every node switches at that
    same round boundary, and every chunk names the version it belongs to.
    """

    def __init__(self, first: Policy | None = None):
        """``first`` may be None when the first policy comes later (start-up measurement)."""
        self.by_version = {} if first is None else {first.version: first}

    def add(self, policy: Policy) -> None:
        known = self.by_version.get(policy.version)
        if known is not None and known != policy:
            raise PolicyError(f"policy version {policy.version} announced twice, differently")
        self.by_version[policy.version] = policy

    def for_round(self, rnd: int) -> Policy:
        """The newest-starting policy with ``start_round <= rnd`` (ties: higher version)."""
        best = None
        for p in self.by_version.values():
            if p.start_round <= rnd and (best is None or (p.start_round, p.version) >
                                         (best.start_round, best.version)):
                best = p
        if best is None:
            raise PolicyError(f"no policy covers round {rnd}")
        return best

    def replay(self, policy: Policy) -> None:
        """Put ``policy`` in force from its start round on, whatever was announced for
        those rounds before (a lost DC's rounds in flight are replayed under it, see
        docs/recovery.md): versions starting at or after it are forgotten. O(versions)."""
        if any(v >= policy.version for v in self.by_version):
            raise PolicyError(f"replay policy {policy.version} is not newer than every known "
                              f"version ({max(self.by_version)})")
        self.by_version = {v: p for v, p in self.by_version.items()
                           if p.start_round < policy.start_round}
        self.by_version[policy.version] = policy

    def drop_superseded(self, rnd: int) -> None:
        """Forget the versions no round from ``rnd`` on can use: keep the one in force at
        ``rnd`` and those starting later."""
        keep = self.for_round(rnd)
        self.by_version = {v: p for v, p in self.by_version.items()
                           if p is keep or p.start_round > keep.start_round}

    @property
    def empty(self) -> bool:
        """No policy known yet (the first follows a start-up measurement)."""
        return not self.by_version

    def __getitem__(self, version: int) -> Policy:
        return self.by_version[version]

    def __contains__(self, version: int) -> bool:
        return version in self.by_version


def widest_children(origin: str, dc: str, links) -> list:
    """``dc``'s children in the widest-path tree out of ``origin`` over the directed
    ``links`` ``(a, b, mbps_ab, mbps_ba)``: every DC is reached along the path whose
    slowest direction is fastest (ties: fewer hops, then DC names), so something sent once
    from ``origin`` (a key's initial value) reaches every DC at the best bottleneck rate.
    Every DC computes the same tree from the same links. ``[]`` if ``origin`` or ``dc``
    is not on a link. O(n^2) for n DCs."""
    rate: dict = {}
    for a, b, ab, ba in links:
        rate.setdefault(a, {})[b] = ab
        rate.setdefault(b, {})[a] = ba
    if origin not in rate or dc not in rate:
        return []
    best = {origin: (float("inf"), 0)}
    parent, done = {origin: None}, set()
    while len(done) < len(best):
        node = min((d for d in best if d not in done),
                   key=lambda d: (-best[d][0], best[d][1], d))
        done.add(node)
        for nxt, mbps in rate[node].items():
            if nxt in done or not mbps > 0:
                continue
            key = (min(best[node][0], mbps), best[node][1] + 1)
            old = best.get(nxt)
            if old is None or (-key[0], key[1]) < (-old[0], old[1]):
                best[nxt], parent[nxt] = key, node
    return sorted(c for c, p in parent.items() if p == dc)
