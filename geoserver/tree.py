"""A WAN synchronization policy as data: aggregation trees over DCs and which chunk uses which.

The scheduler computes a :class:`Policy` (see ``scheduler.policy``) and sends it as JSON; the
global servers only follow it. A tree aggregates towards ``root``: every DC forwards the sum of
its own contribution and its children's partial sums to ``parent[dc]``; the root completes the
sum and sends the same bytes back down the tree.
"""
from __future__ import annotations

from dataclasses import dataclass


class PolicyError(ValueError):
    """A policy that is not a set of spanning trees over the cluster's DCs."""


@dataclass(frozen=True)
class Tree:
    root: str
    parent: dict  # dc -> parent dc (None for the root)

    def children(self, dc: str) -> list:
        return sorted(c for c, p in self.parent.items() if p == dc)

    def validate(self, dcs) -> None:
        """Raise :class:`PolicyError` unless this is a spanning tree of ``dcs`` rooted at root."""
        dcs = set(dcs)
        if set(self.parent) != dcs:
            raise PolicyError(f"tree rooted at {self.root!r} spans {sorted(self.parent)}, "
                              f"cluster has {sorted(dcs)}")
        if self.parent.get(self.root, "x") is not None:
            raise PolicyError(f"root {self.root!r} must have no parent")
        for dc in dcs:
            seen, node = set(), dc
            while node is not None:
                if node in seen or node not in dcs:
                    raise PolicyError(f"DC {dc!r} does not reach root {self.root!r}")
                seen.add(node)
                node = self.parent[node]


@dataclass(frozen=True)
class Policy:
    version: int
    start_round: int
    trees: tuple

    def tree_for(self, key: int, chunk: int) -> Tree:
        """The tree that aggregates chunk ``chunk`` of key ``key``."""
        return self.trees[(key + chunk) % len(self.trees)]

    def to_json(self) -> dict:
        return {"version": self.version, "start_round": self.start_round,
                "trees": [{"root": t.root, "parent": t.parent} for t in self.trees]}

    @classmethod
    def from_json(cls, data: dict, dcs) -> "Policy":
        try:
            trees = tuple(Tree(root=str(t["root"]),
                               parent={str(k): (None if v is None else str(v))
                                       for k, v in t["parent"].items()})
                          for t in data["trees"])
            policy = cls(version=int(data["version"]), start_round=int(data["start_round"]),
                         trees=trees)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise PolicyError(f"malformed policy: {exc!r}") from exc
        if not trees:
            raise PolicyError("policy has no trees")
        for tree in trees:
            tree.validate(dcs)
        return policy
