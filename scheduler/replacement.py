"""Replacing a lost DC server: the scheduler's side (docs/recovery.md).

Pure logic, no sockets, time passed in. :class:`ServerReplacement` follows one replacement:
the surviving servers' reports (each key's applied round and value digest, frozen), the
plan made from them (for each key the round every DC restarts from, the most any survivor
applied, and a survivor that holds it there), and the servers that said they are back.

Why the most any survivor applied is right: a DC applies a key's round only once every
DC's contribution to it was summed, so that round's total is final, and DCs applying the
same rounds hold bit-identical replicas. Every later round was not applied by any survivor:
it is summed again, under the replay policy, from the sums the DCs kept. (The lost server
may have applied one round more; its workers then push that round again, see
:mod:`netstorm.geoserver.worker.client`.)

Several servers lost at once (in different DCs) are one replacement: the plan is made from
the survivors alone, and every lost DC copies every key from them. It needs one survivor:
a lost DC that applied a key's round the survivors had not was a round ahead at most (that
round needed every DC's contribution, so every DC had applied the one before), and that
round is replayed from the kept sums and pushes.
"""
from __future__ import annotations

__all__ = ["RecoveryError", "ServerReplacement"]


class RecoveryError(RuntimeError):
    """The replacement cannot go on; the text names the DCs and keys."""


class ServerReplacement:
    def __init__(self, lost, survivors, deadline: float, paused=None, odd=()):
        """``lost``: the DC (or DCs, lost at once) whose servers are replaced;
        ``survivors``: the DCs whose servers report; all must within ``deadline``, unless
        ``paused()`` (another server lost meanwhile, awaited: its own deadline holds).
        ``odd``: a repair after a replica audit (docs/recovery.md): these surviving DCs'
        replicas differ from the majority's, so they hold no key and copy every key from
        the others (``lost`` names them: no process was lost)."""
        self.paused = paused or (lambda: False)
        self.odd = frozenset(odd)
        self.lost_dcs = (lost,) if isinstance(lost, str) else tuple(sorted(lost))
        if self.odd:
            self.lost_dcs = tuple(sorted(self.odd))
        elif not self.lost_dcs or set(self.lost_dcs) & set(survivors):
            raise ValueError(f"lost {self.lost_dcs} and surviving {sorted(survivors)} DCs "
                             f"must be two sets, the first not empty")
        if not survivors:
            raise RecoveryError(f"the servers of every DC ({', '.join(self.lost_dcs)}) were "
                                f"lost: no replica survives to copy")
        self.survivors = set(survivors)
        self.deadline = deadline
        self.reports: dict = {}         # dc -> {key: (round, digest)}
        self.recovered: set = set()     # servers (DCs) back, the replacement's included
        self.plan: dict | None = None   # key -> (round, source dc, digest)

    def report(self, dc: str, keys) -> None:
        """``dc``'s frozen state: ``[[key, applied round, digest]]``. O(keys)."""
        if dc in self.survivors and self.plan is None:
            self.reports[dc] = {int(k): (int(r), str(d)) for k, r, d in keys}

    @property
    def reported(self) -> bool:
        return self.plan is None and set(self.reports) == self.survivors

    def make_plan(self) -> dict:
        """Once every survivor reported: ``{key: (round, holders, digest)}``: the key's
        latest round any survivor applied, the survivors that applied it (sorted; a DC
        copying the key picks one, see :mod:`netstorm.geoserver.server.recovery`) and its digest.
        Raises :class:`RecoveryError` when holders of a key hold different values, or
        survivors know different keys. O(DCs · keys)."""
        keys = set().union(*(set(r) for r in self.reports.values())) if self.reports else set()
        plan = {}
        for key in sorted(keys):
            missing = sorted(dc for dc, r in self.reports.items() if key not in r)
            if missing:
                raise RecoveryError(f"key {key} is unknown to the servers of "
                                    f"{', '.join(missing)}")
            latest = max(r[key][0] for dc, r in self.reports.items() if dc not in self.odd)
            # an odd replica may be one round ahead: it sums that round again
            ahead = sorted(dc for dc in self.odd if self.reports[dc][key][0] > latest + 1)
            if ahead:
                raise RecoveryError(f"the odd replica of key {key} in {', '.join(ahead)} is "
                                    f"more than a round ahead of every other DC (round "
                                    f"{latest}): there is no majority replica to copy")
            at = tuple(sorted(dc for dc, r in self.reports.items()
                              if r[key][0] == latest and dc not in self.odd))
            digests = {self.reports[dc][key][1] for dc in at}
            if len(digests) > 1:
                raise RecoveryError(f"the replicas of key {key} after round {latest} differ "
                                    f"between {', '.join(at)}: they are not copied")
            plan[key] = (latest, at, digests.pop())
        self.plan = plan
        return plan

    @property
    def start_round(self) -> int:
        """The first round replayed: the replay policy is in force from it on."""
        return min((rnd for rnd, _, _ in self.plan.values()), default=0) + 1

    @property
    def lost_dc(self) -> str:
        """The lost DCs' names, for messages ("dc1" or "dc1, dc3")."""
        return ", ".join(self.lost_dcs)

    def back(self, dc: str) -> bool:
        """``dc``'s server said it recovered; True once every server did. O(1)."""
        if self.plan is not None:
            self.recovered.add(dc)
        return self.recovered >= self.survivors | set(self.lost_dcs)

    def overdue(self, now: float) -> str:
        """Why the replacement failed, once it took longer than allowed; "" otherwise."""
        if now <= self.deadline or self.paused():
            return ""
        if self.plan is None:
            waiting = sorted(self.survivors - set(self.reports))
            return f"no state report from the servers of {', '.join(waiting)}"
        waiting = sorted((self.survivors | set(self.lost_dcs)) - self.recovered)
        return f"the servers of {', '.join(waiting)} did not recover"
