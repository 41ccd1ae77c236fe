"""``mixed`` synchronization: synchronous inside a DC, asynchronous across DCs.

Pure logic like :mod:`aggregation`. A DC applies its own workers' sum of round ``r`` at once
(:meth:`MixedExchange.on_local`) and sends it to every other DC; another DC's sum is applied
when it arrives (:meth:`MixedExchange.on_remote`), in its origin's round order, and passed on.
Replicas are therefore not bit-identical across DCs under ``mixed``: each applies the same
updates, in different orders, to its own weights.

Delay compensation (DC-ASGD, Zheng et al. 2017, as MXNet's ``DCASGD`` implements it): a sum
computed on old weights is corrected by ``lamda * g * g * (w_now - w_then)``. The runtime
knows the staleness of every update: DC B's round ``q`` was computed on B's weights after its
round ``q - 1``; the receiver uses, as ``w_then``, its own weights right after it applied its
own round ``q - 1`` (kept in :attr:`_KeyState.snapshots`), or its current weights when it has
not got that far (an update from a DC ahead of it).

Bounded delay (MLFabric): the pulls of round ``r`` - which let this DC's workers compute
round ``r + 1`` - are answered only once every other DC's round ``r - staleness`` has been
applied here (:meth:`MixedExchange.answerable`). So no DC runs more than ``staleness`` rounds
ahead of the slowest; when it would, its workers wait, and the wait is counted
(:attr:`MixedExchange.waits`). Every send and every apply is O(key size).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..config.settings import MAX_HELD_BYTES_PER_PEER, MAX_ROUNDS_AHEAD

__all__ = ["MixedError", "MixedExchange"]


class MixedError(ValueError):
    """An update that cannot be this DC's to apply; the text says why (logged, dropped)."""


@dataclass
class _KeyState:
    own: int = 0                                    # own rounds applied here
    remote: dict = field(default_factory=dict)      # dc -> its rounds applied here
    early: dict = field(default_factory=dict)       # (dc, round) -> sum that came too soon
    snapshots: dict = field(default_factory=dict)   # own round -> weights just after it


class MixedExchange:
    def __init__(self, dc: str, dcs, staleness: int, route, send, apply,
                 held_bytes: int = MAX_HELD_BYTES_PER_PEER):
        """``route(origin, dc)``: the DCs ``dc`` passes ``origin``'s updates on to (a tree's
        links taken undirected); ``send(dc, key, rnd, origin, array)``;
        ``apply(key, grad, w_then)``: one optimizer step on this DC's weights, compensated
        against ``w_then`` (the weights the update was computed on), returning the new
        weights."""
        self.dc = dc
        self.peers = tuple(d for d in dcs if d != dc)
        self.staleness = staleness
        self._route, self._send, self._apply = route, send, apply
        self.keys: dict = {}
        self.held_bytes = held_bytes
        self.held: dict = {}         # origin -> bytes of its updates kept for later
        self.staleness_seen = 0      # the largest staleness an applied update had, in rounds
        self.waits = 0               # own rounds whose answer waited for a slower DC
        self.applied_log: list = []  # (key, origin, round, staleness), for tests and stats
        self.keep_log = False

    def state(self, key: int) -> _KeyState:
        entry = self.keys.get(key)
        if entry is None:
            entry = self.keys[key] = _KeyState(remote=dict.fromkeys(self.peers, 0))
        return entry

    def answerable(self, key: int) -> int:
        """The latest round whose pulls may be answered: applied here, and no more than
        ``staleness`` rounds ahead of any other DC's rounds applied here. O(DCs)."""
        st = self.state(key)
        slowest = min(st.remote.values(), default=st.own)
        return min(st.own, slowest + self.staleness)

    # ------------------------------------------------------------ own rounds
    def begin(self, key: int, weights) -> None:
        """The initial weights of ``key``: what round 1's updates were computed on."""
        st = self.state(key)
        if st.own == 0:
            st.snapshots[0] = weights

    def on_local(self, key: int, rnd: int, dc_sum, weights):
        """This DC's workers all pushed round ``rnd``: apply it, keep the weights it gives
        for later compensation, send it on; returns the new weights."""
        st = self.state(key)
        if rnd != st.own + 1:
            raise MixedError(f"key {key}: own round {rnd} after {st.own}")
        weights = self._apply(key, dc_sum, weights)     # computed on these: no correction
        st.own = rnd
        st.snapshots[rnd] = weights
        self._note(key, self.dc, rnd, 0)
        for dc in self._route(self.dc, self.dc):
            self._send(dc, key, rnd, self.dc, dc_sum)
        if self.answerable(key) < rnd:
            self.waits += 1
        self._forget(st)
        return weights

    # ------------------------------------------------------------ other DCs' rounds
    def check(self, key: int, rnd: int, origin: str, sender: str) -> str:
        """Why an update of ``origin``'s round ``rnd`` relayed by ``sender`` cannot be
        taken ("" if it can): unknown or own origin, a sender not on the way from the
        origin, a round already applied or too far ahead."""
        if origin not in self.peers:
            return f"origin {origin!r} is not another DC"
        if self.dc not in self._route(origin, sender):
            return f"{sender} does not pass {origin}'s updates to {self.dc}"
        st = self.state(key)
        done = st.remote[origin]
        if rnd <= done or (origin, rnd) in st.early:
            return f"round {rnd} of {origin} already received"
        if rnd > done + MAX_ROUNDS_AHEAD:
            return f"round {rnd} of {origin} is more than {MAX_ROUNDS_AHEAD} ahead of {done}"
        return ""

    def _hold(self, origin: str, array, kept: bool) -> str:
        """Count ``array`` until it is applied; why not, when it is ``kept`` for later and
        would pass the bound on what an origin can make this DC keep."""
        held = self.held.get(origin, 0) + array.nbytes
        if kept and held > self.held_bytes:
            return (f"{self.held.get(origin, 0)} bytes are already kept for {origin} (at most "
                    f"{self.held_bytes})")
        self.held[origin] = held
        return ""

    def on_remote(self, key: int, rnd: int, origin: str, sender: str, array, weights,
                  can_apply: bool = True):
        """``origin``'s round ``rnd`` of ``key``, from neighbour ``sender``: pass it on, then
        apply it and any of that origin's later rounds that came early, in order (or only
        keep them, until :meth:`catch_up`, while ``can_apply`` is false: no optimizer yet).
        Returns the new weights; raises :class:`MixedError` for an update it cannot take."""
        st = self.state(key)
        problem = self.check(key, rnd, origin, sender) or self._hold(
            origin, array, kept=not (can_apply and rnd == st.remote[origin] + 1))
        if problem:
            raise MixedError(problem)
        for dc in self._route(origin, self.dc):
            self._send(dc, key, rnd, origin, array)
        st.early[(origin, rnd)] = array
        return self.catch_up(key, weights) if can_apply else weights

    def catch_up(self, key: int, weights):
        """Apply every kept update that is next in its origin's order; the new weights."""
        st = self.state(key)
        for origin in self.peers:
            while (origin, st.remote[origin] + 1) in st.early:
                q = st.remote[origin] + 1
                grad = st.early.pop((origin, q))
                self.held[origin] -= grad.nbytes
                then = st.snapshots.get(q - 1) if q - 1 <= st.own else None
                weights = self._apply(key, grad, weights if then is None else then)
                st.remote[origin] = q
                self._note(key, origin, q, max(0, st.own - (q - 1)))
        self._forget(st)
        return weights

    def _note(self, key, origin, rnd, staleness) -> None:
        self.staleness_seen = max(self.staleness_seen, staleness)
        if self.keep_log:
            self.applied_log.append((key, origin, rnd, staleness))

    @staticmethod
    def _forget(st: _KeyState) -> None:
        """Snapshots no update can need any more: those before the round every other DC
        has passed (an update of round q needs the one of q - 1)."""
        oldest = min(st.remote.values(), default=st.own)
        for rnd in [r for r in st.snapshots if r < oldest]:
            del st.snapshots[rnd]
