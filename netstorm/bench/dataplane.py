"""Which data plane a netstorm system's servers ran (compiled ``native`` or ``python``):
what its cluster file asked for (``[transport] dataplane``: "auto", "native" or
"python"), and what each server said it ran. A server logs one line containing
``data plane: native`` or ``data plane: python`` (then, when python was chosen for a reason,
the reason in parentheses); the launcher prefixes it with the process (``[server dc1]``).
Pure text parsing, O(log lines)."""
from __future__ import annotations

import re
from pathlib import Path

__all__ = ["DATAPLANES", "DEFAULT_DATAPLANE", "dataplane_record", "parse_dataplane_lines"]

DATAPLANES = ("auto", "native", "python")
DEFAULT_DATAPLANE = "auto"
_LINE = re.compile(r"data plane: (native|python)(?: \(([^)]*)\))?")
_PROCESS = re.compile(r"\[([^\]]+)\]")


def parse_dataplane_lines(text: str) -> list:
    """``[{"process", "dataplane", "reason"?}]``, one per server line saying which data
    plane it runs (``process``: the launcher's prefix, "" if none), in log order."""
    out = []
    for line in text.splitlines():
        found = _LINE.search(line)
        if not found:
            continue
        process = _PROCESS.search(line[:found.start()])
        row = {"process": process.group(1) if process else "", "dataplane": found.group(1)}
        if found.group(2):
            row["reason"] = found.group(2)
        out.append(row)
    return out


def dataplane_record(configured: str | None, log_path: Path | None) -> dict:
    """The ``dataplane`` figure of one system's result: ``configured`` (the cluster file's
    value; None: not a netstorm system, returns {}), ``servers`` (how many servers said
    each data plane), ``ran`` (the one they all ran, "mixed", or the configured value when
    no server said: ``source`` says which) and the reasons given for python."""
    if configured is None:
        return {}
    text = ""
    if log_path is not None and Path(log_path).exists():
        text = Path(log_path).read_text(errors="replace")
    lines = parse_dataplane_lines(text)
    if not lines:
        return {"configured": configured, "ran": configured, "source": "configured"}
    counts: dict = {}
    for row in lines:
        counts[row["dataplane"]] = counts.get(row["dataplane"], 0) + 1
    reasons = sorted({row["reason"] for row in lines if row.get("reason")})
    return {"configured": configured, "ran": next(iter(counts)) if len(counts) == 1
            else "mixed", "servers": counts, "source": "server logs",
            **({"python_reasons": reasons} if reasons else {})}
