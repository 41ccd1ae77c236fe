"""The cluster's status as the scheduler sees it, for the live status page, ``/status.json``,
``netstorm-status`` and the periodic one-line summary on the launcher's console.

:class:`ClusterStatus` is fed from three places, all on the scheduler's loop thread: every
record the scheduler writes to ``stats`` (:meth:`~ClusterStatus.stats_sink`: policies,
re-plans, recoveries, stalls), every server's heartbeat (:meth:`~ClusterStatus.on_report`:
its round and the measured rates of the links into its DC) and, once a second, a
:class:`SchedulerView` of the scheduler's own state (:meth:`~ClusterStatus.tick`: the
policy in force, the rates it was planned on, the workers finished). From them it builds a
JSON-ready snapshot (:meth:`~ClusterStatus.snapshot`, the fields in docs/operations.md) and
keeps it as bytes under a lock, so the page's thread only ever copies finished bytes and
never touches the scheduler's objects.

Pure apart from the lock: time is passed in. Costs: a heartbeat O(links into its DC), a
record O(1), a snapshot O(DCs + links + trees x DCs) plus the cut bound, computed again
only when the planned rates or the model size change (:mod:`.planning.cut_bound`).
"""
from __future__ import annotations

import collections
import json
import math
import threading
from dataclasses import dataclass

from netstorm.geoserver.config.sync import SyncConfig

from .planning import cut_lower_bound

__all__ = ["EVENTS", "HISTORY", "SNAPSHOT_VERSION", "SUMMARY_S", "ClusterStatus",
           "SchedulerView", "circle_layout", "steps_per_round", "tree_edges", "view_of"]

SNAPSHOT_VERSION = 1    # /status.json's "version": bumped when a field changes meaning
HISTORY = 120           # (round, seconds per round) points kept for the chart
EVENTS = 20             # the last events shown
RATE_WINDOW_S = 10.0    # the round rate is measured over this many recent seconds
TICK_S = 1.0            # the snapshot is rebuilt at most this often
POINT_S = 0.5           # a chart point spans at least this long (reports come every beat)
SUMMARY_S = 5.0         # the one-line summary is logged this often while rounds advance
BEHIND_WEIGHT = 0.1     # weight of a new report in a DC's mean rounds behind the leader
SLOW_BEHIND = 0.25      # a DC at least this many rounds behind on average is the slowest


@dataclass(frozen=True)
class SchedulerView:
    """What the snapshot needs of the scheduler's own state (:func:`view_of`).
    ``topology``: the WAN the policy in force was planned on (None: not known, e.g. a star
    without declared links); ``finished``: workers that said BYE."""

    policy: object = None           # geoserver.policy.tree.Policy in force, or None
    topology: object = None         # scheduler.topology.Topology, or None
    workers: int = 0
    finished: int = 0
    recovering: str = ""            # the DC whose server is being replaced ("": none)


def view_of(scheduler) -> SchedulerView:
    """The :class:`SchedulerView` of a running :class:`~.service.Scheduler`: the policy in
    force, the trusted rates planning uses (``adapt``) or the declared/measured ones."""
    table = scheduler.table
    if table is None or scheduler.rounds.policy is None:
        return SchedulerView()
    adaptation = scheduler.policies.adaptation
    topology = adaptation.planning_topology() if adaptation is not None \
        else scheduler.policies.wan_topology
    workers = {n.id for n in table.workers()}
    replacement = scheduler.replacement
    return SchedulerView(policy=scheduler.rounds.policy_in_force(), topology=topology,
                         workers=len(workers), finished=len(workers & scheduler.finished),
                         recovering="" if replacement is None else str(replacement.lost_dc))


def steps_per_round(sync: SyncConfig):
    """A worker's optimizer steps per WAN round under ``sync`` (docs/sync.md): 1 for
    ``fsa`` and ``mixed``, ``k1 * k2`` for ``hfa``, ``h`` for ``diloco``; None for
    ``esync``, whose steps per round change every round."""
    return {"fsa": 1, "mixed": 1, "hfa": sync.k1 * sync.k2, "diloco": sync.h}.get(sync.mode)


def circle_layout(names) -> dict:
    """``{dc: [x, y]}`` on a circle in the unit square, the first DC at the top, the others
    clockwise (the cluster file gives no coordinates). O(DCs)."""
    n = len(names)
    if n == 1:
        return {names[0]: [0.5, 0.5]}
    return {name: [round(0.5 + 0.4 * math.sin(2 * math.pi * i / n), 4),
                   round(0.5 - 0.4 * math.cos(2 * math.pi * i / n), 4)]
            for i, name in enumerate(names)}


def tree_edges(tree) -> list:
    """The directed links a tree uses: ``[(src, dst, "up" | "down")]``: each DC's partial
    sum to its parent, then the total from each DC's broadcast parent. O(DCs)."""
    up = [(dc, parent, "up") for dc, parent in sorted(tree.parent.items()) if parent]
    down = [(parent, dc, "down") for dc, parent in sorted(tree.down_parent.items()) if parent]
    return up + down


class ClusterStatus:
    """The status of one cluster (see the module doc). ``config``: its ClusterConfig;
    ``start``: the scheduler's start on the clock ``now`` is read from (monotonic)."""

    def __init__(self, config, start: float):
        self.dcs = [dc.name for dc in config.dcs]
        self.workers_per_dc = {dc.name: dc.workers for dc in config.dcs}
        self.start = start
        self.total_steps = config.status.total_steps
        self.samples_per_step = config.status.samples_per_step
        self.steps_per_round = steps_per_round(config.sync)
        self.sync_mode = config.sync.mode
        self.layout = circle_layout(self.dcs)
        self.dc_round: dict = {}            # dc -> latest round its server reported
        self.behind: dict = {}              # dc -> mean rounds behind the leading DC
        self.step_s: dict = {}              # esync: dc -> its slowest seconds per step
        self.measured: dict = {}            # (src, dst) -> [Mbit/s, measured at]
        self.stalled: dict = {}             # (src, dst) its sender reports stuck -> since
        self.model_bytes = 0                # from the servers' reports (0: not known yet)
        self.round_log = collections.deque()            # (time, latest round)
        self.history = collections.deque(maxlen=HISTORY)    # (round, s per round)
        self.events = collections.deque(maxlen=EVENTS)      # {"t", "kind", "text"}
        self.policy_version = 0
        self.view = SchedulerView()
        self._bound_key = None
        self._bound = None                  # seconds: the cut bound for _bound_key
        self._next_tick = start
        self._next_summary = start + SUMMARY_S
        self._summarized_round = 0
        self._lock = threading.Lock()
        self._json = b""
        self.publish(start)

    # ------------------------------------------------------------------ feeds
    def stats_sink(self, downstream):
        """A ``stats(record)`` callable: each record is seen here, then goes on to
        ``downstream`` (the ``[scheduler] stats`` file)."""
        def stats(record: dict) -> None:
            self.on_record(record)
            downstream(record)
        return stats

    def on_record(self, record: dict) -> None:
        """A stats record: policies and re-plans, recoveries and stalls become events."""
        kind, t = record.get("event"), record.get("t", self.start)
        if kind == "policy":
            self.policy_version = max(self.policy_version, int(record.get("version", 0)))
            trees = len(record.get("trees", ()))
            if record.get("reason") == "re-planned":
                predicted = record.get("predicted_s")
                self._event(t, "re-plan", f"policy v{record.get('version')}: {trees} trees "
                            f"from round {record.get('start_round')}"
                            + (f", predicted {predicted:g} s/round" if predicted else ""))
            else:
                self._event(t, "policy", f"policy v{record.get('version')} "
                            f"({record.get('reason')}): {trees} trees")
        elif kind == "replace":
            self._event(t, "recovery", f"{record.get('dc')}'s server lost: replacing it")
        elif kind == "replaced":
            self._event(t, "recovery", f"{record.get('dc')}'s server replaced")
        elif kind in ("repair", "repaired"):     # a replica audit's (docs/recovery-audit.md)
            dcs = ", ".join(map(str, record.get("dcs", ())))
            self._event(t, "recovery", f"{dcs}'s replica differs from the majority's: "
                        f"replacing it" if kind == "repair" else
                        f"{dcs}'s replica replaced from the majority's")
        elif kind == "stall":
            text = record.get("message") or record.get("reason") or json.dumps(
                {k: v for k, v in record.items() if k not in ("t", "event")})
            self._event(t, "stall", str(text))

    def on_report(self, dc: str, meta: dict, now: float) -> None:
        """A heartbeat of ``dc``'s server (already checked against its schema): its round,
        the links into it ``{src: [Mbit/s, age s]}``, the DCs its messages are stuck
        towards, ``model_bytes`` when the server reports it. O(links into ``dc``)."""
        rnd = int(meta.get("round", 0))
        self.dc_round[dc] = rnd
        leader = max(self.dc_round.values())
        before = self.behind.get(dc, 0.0)
        self.behind[dc] = before + BEHIND_WEIGHT * ((leader - rnd) - before)
        if not self.round_log or leader > self.round_log[-1][1] and \
                now - self.round_log[-1][0] >= POINT_S:
            if self.round_log and self.round_log[-1][1] >= 1:
                t0, r0 = self.round_log[-1]
                self.history.append((leader, round((now - t0) / (leader - r0), 4)))
            self.round_log.append((now, leader))
        while len(self.round_log) > 2 and now - self.round_log[1][0] > RATE_WINDOW_S:
            self.round_log.popleft()
        for src, (mbps, age) in (meta.get("links") or {}).items():
            self.measured[(src, dc)] = [float(mbps), now - float(age)]
        stuck = {(dc, str(dst)) for dst in meta.get("stalled") or ()}
        for key in [k for k in self.stalled if k[0] == dc and k not in stuck]:
            del self.stalled[key]           # its sender moves data again
        for key in sorted(stuck - self.stalled.keys()):
            self.stalled[key] = now
            self._event(now, "stall", f"link {key[0]}->{key[1]} stalled: nothing moved "
                        f"for [transport] stall_s while data waited")
        if "step_s" in meta:
            self.step_s[dc] = float(meta["step_s"])
        if isinstance(meta.get("model_bytes"), int) and meta["model_bytes"] > 0:
            self.model_bytes = meta["model_bytes"]

    def _event(self, t: float, kind: str, text: str) -> None:
        self.events.append({"t": round(float(t) - self.start, 1), "kind": kind, "text": text})

    # ------------------------------------------------------------------ the loop's tick
    def tick(self, view_fn, now: float):
        """Once a second at most: take ``view_fn()`` (a :class:`SchedulerView`) and publish
        a new snapshot. Returns the summary line when one is due (every
        :data:`SUMMARY_S` while rounds advance), else None."""
        if now < self._next_tick:
            return None
        self._next_tick = now + TICK_S
        self.view = view_fn()
        snap = self.publish(now)
        latest = snap["rounds"]["latest"]
        if now < self._next_summary or latest <= self._summarized_round:
            return None
        self._next_summary, self._summarized_round = now + SUMMARY_S, latest
        return summary_line(snap)

    def publish(self, now: float) -> dict:
        """Build the snapshot at ``now`` and keep it for the page's thread."""
        snap = self.snapshot(now)
        data = json.dumps(snap, separators=(",", ":"), allow_nan=False).encode()
        with self._lock:
            self._json = data
        return snap

    def json_bytes(self) -> bytes:
        """The latest snapshot as JSON (any thread)."""
        with self._lock:
            return self._json

    # ------------------------------------------------------------------ the snapshot
    def round_rate(self, now: float) -> float:
        """Rounds per second over the last :data:`RATE_WINDOW_S`: the rounds reported in
        it over the time from its first report to ``now`` (so it falls to 0 when rounds
        stop). O(reports kept)."""
        recent = [(t, r) for t, r in self.round_log if now - t <= RATE_WINDOW_S]
        if len(recent) < 2 or now <= recent[0][0]:
            return 0.0
        return (recent[-1][1] - recent[0][1]) / (now - recent[0][0])

    def bound_s(self):
        """The cut bound of one round on the planned WAN (None: no rates or no model size
        known). Recomputed only when either changes."""
        topology = self.view.topology
        if topology is None or not self.model_bytes:
            return None
        key = (tuple(sorted(topology.rates().items())), self.model_bytes)
        if key != self._bound_key:
            try:
                bound = cut_lower_bound(topology, self.model_bytes)[0]
            except (ValueError, ZeroDivisionError):     # a WAN that cannot carry a round
                bound = None
            self._bound_key, self._bound = key, bound
        return self._bound

    def slowest_dc(self):
        """``{"dc", "why"}``: under ``esync`` the DC with the most seconds per step;
        otherwise the DC furthest behind the leader on average, when that is at least
        :data:`SLOW_BEHIND` rounds; None when every DC keeps pace."""
        if self.step_s:
            dc = max(sorted(self.step_s), key=self.step_s.get)
            return {"dc": dc, "why": f"{self.step_s[dc]:.3g} s per step"}
        if len(self.behind) < 2:
            return None
        dc = max(sorted(self.behind), key=self.behind.get)
        if self.behind[dc] < SLOW_BEHIND:
            return None
        return {"dc": dc, "why": f"{self.behind[dc]:.2f} rounds behind on average"}

    def snapshot(self, now: float) -> dict:
        """The JSON-ready status at ``now`` (docs/operations.md says every field)."""
        view = self.view
        planned = view.topology.rates() if view.topology is not None else {}
        policy = view.policy
        trees, use = [], {}
        if policy is not None:
            for tree, share in zip(policy.trees, policy.shares):
                edges = tree_edges(tree)
                trees.append({"root": tree.root, "share": round(share, 4),
                              "edges": [[a, b, d] for a, b, d in edges]})
                for a, b, _ in edges:
                    use[(a, b)] = use.get((a, b), 0.0) + share
        links = []
        for key in sorted(set(planned) | set(self.measured) | set(use)):
            measured = self.measured.get(key)
            links.append({
                "src": key[0], "dst": key[1],
                "measured_mbps": None if measured is None else round(measured[0], 3),
                "measured_age_s": None if measured is None else round(now - measured[1], 1),
                "planned_mbps": None if key not in planned else round(planned[key], 3),
                "share": round(use.get(key, 0.0), 4), "stalled": key in self.stalled})
        rate = self.round_rate(now)
        bound = self.bound_s()
        round_s = 1.0 / rate if rate > 0 else None
        latest = max(self.dc_round.values(), default=0)
        completed = max(0, min(self.dc_round.get(dc, 0) for dc in self.dcs) - 1)
        dcs = [{"name": dc, "x": self.layout[dc][0], "y": self.layout[dc][1],
                "workers": self.workers_per_dc[dc], "round": self.dc_round.get(dc, 0),
                "behind": round(self.behind.get(dc, 0.0), 2)} for dc in self.dcs]
        wan = None if not (self.model_bytes and rate) else \
            round(2 * (len(self.dcs) - 1) * self.model_bytes * rate / 1e6, 3)
        return {
            "version": SNAPSHOT_VERSION, "uptime_s": round(now - self.start, 1),
            "state": self._state(latest),
            "sync": self.sync_mode, "dcs": dcs, "links": links,
            "policy": None if policy is None else {
                "version": policy.version, "start_round": policy.start_round,
                "latest_version": max(self.policy_version, policy.version), "trees": trees},
            "rounds": {"latest": latest, "completed": completed,
                       "rate_per_s": round(rate, 4),
                       "round_s": None if round_s is None else round(round_s, 4),
                       "bound_s": None if bound is None else round(bound, 4),
                       "ratio": None if bound is None or round_s is None
                       else round(round_s / bound, 3),
                       "history": [list(p) for p in self.history]},
            "model_bytes": self.model_bytes or None, "wan_mb_per_s": wan,
            "progress": self._progress(completed, rate),
            "workers": {"total": view.workers, "finished": view.finished},
            "slowest_dc": self.slowest_dc(), "events": list(self.events)}

    def _state(self, latest: int) -> str:
        if self.view.policy is None:
            return "starting"
        if self.view.recovering:
            return f"recovering {self.view.recovering}"
        if self.view.workers and self.view.finished == self.view.workers:
            return "finished"
        return "training" if latest else "initializing"

    def _progress(self, completed: int, rate: float) -> dict:
        """Steps and samples done (when the steps per round are fixed), the total and an
        ETA when the script declared its total steps (``[status] total_steps``)."""
        steps = None if self.steps_per_round is None else completed * self.steps_per_round
        out = {"rounds": completed, "steps": steps, "total_steps": self.total_steps or None,
               "samples": steps * self.samples_per_step
               if steps is not None and self.samples_per_step else None,
               "fraction": None, "eta_s": None}
        if self.total_steps and steps is not None:
            out["fraction"] = round(min(1.0, steps / self.total_steps), 4)
            rounds_left = max(0, math.ceil((self.total_steps - steps) / self.steps_per_round))
            if rate > 0:
                out["eta_s"] = round(rounds_left / rate, 1)
        return out


def summary_line(snap: dict) -> str:
    """The one-line cluster summary the scheduler logs every :data:`SUMMARY_S`: round
    rate, slowest DC, WAN MB/s, the round time against the cut bound, the ETA."""
    rounds, slow, progress = snap["rounds"], snap["slowest_dc"], snap["progress"]
    parts = [f"round {rounds['latest']}", f"{rounds['rate_per_s']:.2f} rounds/s"]
    parts.append(f"slowest DC {slow['dc']} ({slow['why']})" if slow else "DCs in step")
    if snap["wan_mb_per_s"] is not None:
        parts.append(f"WAN {snap['wan_mb_per_s']:.1f} MB/s")
    if rounds["ratio"] is not None:
        parts.append(f"round {rounds['round_s']:.3g} s = {rounds['ratio']:.2f}x the bound "
                     f"{rounds['bound_s']:.3g} s")
    elif rounds["round_s"] is not None:
        parts.append(f"round {rounds['round_s']:.3g} s (bound unknown)")
    if progress["eta_s"] is not None:
        parts.append(f"{100 * progress['fraction']:.0f}% done, ETA {progress['eta_s']:.0f} s")
    return "status: " + ", ".join(parts)
