"""The chaos benchmark's arithmetic (``netstorm-bench --mode train --chaos SPEC``), pure:
no processes, no clock, no MXNet.

* :func:`parse_spec`: ``--chaos`` text -> the fault kinds and their lengths,
  e.g. ``server,dc-stop:20s,link-cut:15s,worker,scheduler`` or ``all``.
* :func:`schedule`: a seeded schedule, one fault every ``every_s`` seconds up to
  ``duration_s``: the kinds in a shuffled order per cycle (every kind once per cycle, so a
  run of ``len(kinds)`` faults has each), each on a random target (a DC, a worker, a link).
* :func:`goodput`, :func:`recovery_times`, :func:`lost_or_doubled`: what a run's records
  say (docs/recovery-chaos.md defines each figure).
"""
from __future__ import annotations

import random
import re
import statistics
from dataclasses import asdict, dataclass

__all__ = ["DEFAULT_LENGTH_S", "KINDS", "Fault", "FaultKind", "ChaosSpecError", "goodput",
           "lost_or_doubled", "parse_seconds", "parse_spec", "recovery_times", "round_times",
           "schedule", "summarize_recoveries"]

KINDS = ("server", "dc-stop", "link-cut", "worker", "scheduler")
DEFAULT_LENGTH_S = {"dc-stop": 20.0, "link-cut": 20.0}     # the kinds that last a while
STEADY_WITHIN = 0.10        # "recovered": a round again within 10% of the median before
BEFORE_ROUNDS = 20          # the median before a fault: over at most this many rounds


class ChaosSpecError(ValueError):
    """A ``--chaos`` (or ``--every``/``--duration``) value that cannot work; the message
    names the flag."""


@dataclass(frozen=True)
class FaultKind:
    name: str               # one of KINDS
    length_s: float = 0.0   # dc-stop, link-cut: how long the DC stays stopped / link cut


@dataclass(frozen=True)
class Fault:
    """One scheduled fault: ``at_s`` seconds after the faulty run's first step."""

    index: int
    at_s: float
    kind: str
    target: str             # "dc3" (server, dc-stop), "dc3/1" (worker), "dc1-dc3"
    length_s: float = 0.0   # (link-cut), "scheduler"

    def record(self) -> dict:
        return asdict(self)


def parse_seconds(text: str, flag: str) -> float:
    """``"20"``, ``"20s"``, ``"1.5m"`` -> seconds (> 0); a ChaosSpecError naming ``flag``."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*(s|m|min)?\s*", text or "")
    if not match or float(match.group(1)) <= 0:
        raise ChaosSpecError(f"{flag}: {text!r} is not a length of time > 0 (e.g. 20s, 1.5m)")
    return float(match.group(1)) * (60.0 if match.group(2) in ("m", "min") else 1.0)


def parse_spec(text: str) -> tuple:
    """``--chaos`` -> a tuple of :class:`FaultKind` (each kind once, in the order given):
    comma-separated kinds of :data:`KINDS`, or ``all``; ``dc-stop`` and ``link-cut`` take
    a length (``dc-stop:20s``; default :data:`DEFAULT_LENGTH_S`), the others none."""
    kinds: dict = {}
    for item in filter(None, (p.strip() for p in (text or "").split(","))):
        name, colon, length = item.partition(":")
        name = name.strip()
        if name == "all" and not colon:
            for kind in KINDS:
                kinds.setdefault(kind, FaultKind(kind, DEFAULT_LENGTH_S.get(kind, 0.0)))
            continue
        if name not in KINDS:
            raise ChaosSpecError(f"--chaos: unknown fault kind {name!r}; known: "
                                 f"{', '.join(KINDS)} (or all)")
        if colon and name not in DEFAULT_LENGTH_S:
            raise ChaosSpecError(f"--chaos: {name} takes no length ({item!r}); only "
                                 f"{', '.join(DEFAULT_LENGTH_S)} do, e.g. dc-stop:20s")
        seconds = parse_seconds(length, f"--chaos {name}") if colon else \
            DEFAULT_LENGTH_S.get(name, 0.0)
        if name in kinds:
            raise ChaosSpecError(f"--chaos: {name} is given twice")
        kinds[name] = FaultKind(name, seconds)
    if not kinds:
        raise ChaosSpecError(f"--chaos: no fault kind in {text!r}; give some of "
                             f"{', '.join(KINDS)}, or all")
    return tuple(kinds.values())


def schedule(kinds, every_s: float, duration_s: float, seed: int, dcs, workers_per_dc: int,
             links=(), scheduler_dc: str = "") -> list:
    """The faults of a run: at ``every_s``, ``2 every_s``, ... while ``<= duration_s``
    (at least one), the kinds shuffled per cycle with ``seed`` (the same arguments: the
    same schedule), each on a random target: a DC for server and dc-stop (dc-stop never
    the ``scheduler_dc``, whose stop would stop the scheduler's peers only by accident of
    placement: the scheduler fault is its own kind), ``dc/i`` for a worker, a link
    ``a-b`` of ``links`` (pairs) for link-cut. A kind with no possible target (link-cut
    without links) is a ChaosSpecError. O(faults)."""
    if not every_s > 0 or not duration_s > 0:
        raise ChaosSpecError(f"--every and --duration must be > 0 seconds, got {every_s:g} "
                             f"and {duration_s:g}")
    dcs = list(dcs)
    targets = {"server": dcs, "dc-stop": [d for d in dcs if d != scheduler_dc] or dcs,
               "worker": [f"{d}/{i}" for d in dcs for i in range(workers_per_dc)],
               "link-cut": [f"{a}-{b}" for a, b in links], "scheduler": ["scheduler"]}
    for kind in kinds:
        if not targets[kind.name]:
            raise ChaosSpecError(f"--chaos {kind.name}: nothing to target here (a link-cut "
                                 f"needs the emulated WAN's links)")
    rng = random.Random(seed)
    count = max(1, int(duration_s // every_s))
    faults, cycle = [], []
    for index in range(count):
        if not cycle:
            cycle = list(kinds)
            rng.shuffle(cycle)
        kind = cycle.pop(0)
        faults.append(Fault(index, round((index + 1) * every_s, 3), kind.name,
                            rng.choice(targets[kind.name]), kind.length_s))
    return faults


def goodput(useful_samples: int, wall_s: float) -> float:
    """Useful samples per second: samples whose update is in the final model (computed
    once, applied once; a step recomputed after a restart counts once) over the wall time
    from the first step's end to the last step's end. 0 for an empty run."""
    return useful_samples / wall_s if wall_s > 0 and useful_samples > 0 else 0.0


def round_times(steps, period: int = 1) -> list:
    """``[(round, t)]`` from rank 0's ``[(step, t)]`` in arrival order: the steps that end
    a round (multiples of ``period``: the local steps per outer round under diloco, 1 when
    every step synchronizes). A restarted run's repeated steps stay, in order."""
    period = max(1, int(period))
    return [(step // period, t) for step, t in steps if step % period == 0]


def recovery_times(rounds, injected_at: float, until: float | None = None) -> dict:
    """Time to recover from a fault injected at ``injected_at`` (seconds, the clock of
    ``rounds``' ``t``), from ``[(round, t)]``:

    * ``next_round_s``: until the first round beyond the last one done before the fault
      completed (a restart that recomputes rounds gets there only after them);
    * ``steady_s``: until a round beyond that one completed within :data:`STEADY_WITHIN`
      of the median round time over the :data:`BEFORE_ROUNDS` rounds before the fault
      (a round time: between consecutive rounds, r then r + 1).

    Rounds that still completed after the fault and were then done again (the rounds go
    back before ``until``, the next fault's injection: a restart from a checkpoint) count
    as lost: recovery is then measured beyond the highest of them, after the restart.
    Either is None if it never happened (or, for ``steady_s``, if there was no round time
    before the fault to compare with). O(rounds)."""
    before = [(r, t) for r, t in rounds if t <= injected_at]
    after = [(r, t) for r, t in rounds if t > injected_at]
    intervals = [t1 - t0 for (r0, t0), (r1, t1) in zip(before, before[1:]) if r1 == r0 + 1]
    reached = max((r for r, _ in before), default=0)
    for i in range(1, len(after)):
        if until is not None and after[i][1] > until:
            break
        if after[i][0] <= after[i - 1][0]:      # a restart: rounds done again from here
            reached = max(reached, max(r for r, _ in after[:i]))
            after = after[i:]
            break
    out = {"next_round_s": None, "steady_s": None,
           "median_before_s": round(statistics.median(intervals[-BEFORE_ROUNDS:]), 3)
           if intervals else None}
    beyond = [(r, t) for r, t in after if r > reached]
    if beyond:
        out["next_round_s"] = round(beyond[0][1] - injected_at, 3)
    if not intervals:
        return out
    limit = (1 + STEADY_WITHIN) * out["median_before_s"]
    previous = None
    for r, t in after:
        if previous is not None and r == previous[0] + 1 and r > reached + 1 \
                and t - previous[1] <= limit:
            out["steady_s"] = round(t - injected_at, 3)
            break
        previous = (r, t)
    return out


def summarize_recoveries(events) -> dict:
    """Per fault kind, from the injected faults' records (``kind``, ``next_round_s``,
    ``steady_s``): ``{kind: {count, next_round_median_s, next_round_max_s,
    steady_median_s, steady_max_s, never_steady}}``."""
    out: dict = {}
    for kind in dict.fromkeys(e["kind"] for e in events):
        mine = [e for e in events if e["kind"] == kind]
        row = {"count": len(mine)}
        for key, name in (("next_round_s", "next_round"), ("steady_s", "steady")):
            values = [e[key] for e in mine if e.get(key) is not None]
            row[f"{name}_median_s"] = round(statistics.median(values), 3) if values else None
            row[f"{name}_max_s"] = round(max(values), 3) if values else None
        row["never_steady"] = sum(e.get("steady_s") is None for e in mine)
        out[kind] = row
    return out


def lost_or_doubled(audits, final_digests, steps_reached, steps_wanted: int) -> dict:
    """Lost or doubled updates, three independent counts and their sum:

    * ``audit_mismatches``: mismatches in the scheduler's ``replica_audit`` stats records
      (None when the run wrote none: no audit in this checkout, or it was off);
    * ``replicas_differing``: workers whose final weights digest differs from the
      majority's (every mode here ends with a synchronization: all replicas equal);
    * ``steps_missing``: per worker, ``steps_wanted`` minus the last step it completed
      (a lost update leaves a rank short; a doubled one would show in the digests).

    ``final_digests``/``steps_reached``: one entry per worker."""
    mismatches = None
    if audits:
        mismatches = sum(len(a.get("mismatches") or ()) for a in audits)
    digests = list(final_digests)
    majority = max(set(digests), key=digests.count) if digests else None
    differing = sum(d != majority for d in digests)
    missing = sum(max(0, steps_wanted - s) for s in steps_reached)
    return {"audit_mismatches": mismatches, "audit_records": len(audits or ()),
            "replicas_differing": differing, "steps_missing": missing,
            "total": (mismatches or 0) + differing + missing}
