"""``netstorm-status``'s text: a running cluster's status snapshot (the scheduler's
``/status.json``, fields in docs/operations.md) as tables for a terminal: the state, rounds
and round time against the cut bound, progress and ETA, the slowest DC, one row per DC and
per link (measured and planned rate), the trees in force and the last events.

Pure: :func:`render` takes the parsed JSON and returns text; :func:`check_snapshot` says
what is wrong with JSON that is not a status snapshot. O(DCs + links + trees x DCs)."""
from __future__ import annotations

__all__ = ["SNAPSHOT_VERSION", "check_snapshot", "duration", "render", "table"]

SNAPSHOT_VERSION = 1        # the /status.json version this renders (scheduler/status.py)
REQUIRED = ("version", "state", "dcs", "links", "policy", "rounds", "progress", "workers",
            "slowest_dc", "events")


def check_snapshot(data) -> str:
    """Why ``data`` is not a status snapshot this version renders ("" if it is one)."""
    if not isinstance(data, dict):
        return "the answer is not a JSON object"
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        return f"the answer lacks {', '.join(missing)}"
    if data["version"] != SNAPSHOT_VERSION:
        return (f"the answer is status version {data['version']!r}; this netstorm-status "
                f"reads version {SNAPSHOT_VERSION} (use the same netstorm version)")
    return ""


def _num(value, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits, whole from 1000 on; ``-`` for None."""
    if value is None:
        return "-"
    return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.{digits}g}"


def duration(seconds) -> str:
    """``1 h 2 min``, ``3 min 20 s``, ``42 s``; ``-`` for None."""
    if seconds is None:
        return "-"
    s = int(round(seconds))
    h, m, sec = s // 3600, s % 3600 // 60, s % 60
    return f"{h} h {m} min" if h else f"{m} min {sec} s" if m else f"{sec} s"


def table(header: list, rows: list, right: set = frozenset()) -> list:
    """Lines of a plain text table: columns as wide as their widest cell, those whose
    index is in ``right`` right-aligned. O(cells)."""
    cells = [header] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return ["  ".join(c.rjust(w) if i in right else c.ljust(w)
                      for i, (c, w) in enumerate(zip(row, widths))).rstrip()
            for row in cells]


def _headline(snap: dict, source: str) -> list:
    rounds, progress = snap["rounds"], snap["progress"]
    lines = [f"netstorm cluster at {source}: {snap['state']}, up {duration(snap.get('uptime_s'))}"
             f", {len(snap['dcs'])} DCs, sync {snap.get('sync', '?')}"]
    rate = f" ({rounds['rate_per_s']:.3g}/s)" if rounds.get("rate_per_s") else ""
    line = f"rounds: {rounds['completed']} completed{rate}"
    if rounds.get("round_s") is not None:
        line += f"; round {_num(rounds['round_s'])} s"
        line += f" = {rounds['ratio']:.2f}x the cut bound {_num(rounds['bound_s'])} s" \
            if rounds.get("ratio") is not None else " (cut bound unknown: model size not reported)"
    if snap.get("wan_mb_per_s") is not None:
        line += f"; WAN {snap['wan_mb_per_s']:.3g} MB/s"
    lines.append(line)
    if progress.get("steps") is not None:
        total = progress.get("total_steps")
        line = f"progress: {progress['steps']} steps" + (f" of {total}" if total else "")
        if progress.get("fraction") is not None:
            line += f" ({100 * progress['fraction']:.0f}%)"
        if progress.get("samples") is not None:
            line += f", {progress['samples']} samples"
        line += f", ETA {duration(progress['eta_s'])}" if progress.get("eta_s") is not None \
            else ("" if total else " (no ETA: [status] total_steps not declared)")
        lines.append(line)
    slow = snap["slowest_dc"]
    lines.append("slowest DC: " + (f"{slow['dc']} ({slow['why']})" if slow
                                   else "none, every DC keeps pace"))
    workers = snap["workers"]
    lines.append(f"workers: {workers.get('finished', 0)} of {workers.get('total', 0)} finished")
    return lines


def render(snap: dict, source: str) -> str:
    """The whole status as text (``source``: where it was read, for the first line)."""
    lines = _headline(snap, source)
    lines += [""] + table(["DC", "ROUND", "WORKERS", "BEHIND"],
                          [[d["name"], d["round"], d["workers"], f"{d.get('behind', 0):.2f}"]
                           for d in snap["dcs"]], right={1, 2, 3})
    link_rows = [[f"{l['src']} -> {l['dst']}", _num(l["measured_mbps"], 4),
                  _num(l["planned_mbps"], 4),
                  f"{100 * l['share']:.0f}%" if l.get("share") else "-",
                  "-" if l.get("measured_age_s") is None else f"{l['measured_age_s']:g} s",
                  "stalled" if l.get("stalled") else ""] for l in snap["links"]]
    lines += [""] + table(["LINK", "MEASURED Mbit/s", "PLANNED Mbit/s", "SHARE", "AGE", ""],
                          link_rows, right={1, 2, 3, 4})
    policy = snap["policy"]
    lines.append("")
    if policy is None:
        lines.append("TREES: no policy yet")
    else:
        lines.append(f"TREES: policy v{policy['version']} in force from round "
                     f"{policy['start_round']}")
        for tree in policy["trees"]:
            up = " ".join(f"{a}->{b}" for a, b, d in tree["edges"] if d == "up")
            down = " ".join(f"{a}->{b}" for a, b, d in tree["edges"] if d == "down")
            lines.append(f"  root {tree['root']} {100 * tree['share']:.0f}%: up {up or '-'}; "
                         f"down {down or '-'}")
    lines += ["", "EVENTS" + ("" if snap["events"] else ": none yet")]
    lines += [f"  {e['t']:>8.1f} s  {e['kind']:<9} {e['text']}"
              for e in reversed(snap["events"])]
    return "\n".join(lines) + "\n"
