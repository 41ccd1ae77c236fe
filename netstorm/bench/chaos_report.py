"""The chaos benchmark's report (netstorm.bench.chaos_run's result dict): a text table per
fault kind with goodput, lost or doubled updates and the final quality of both runs, and
a PNG of quality against wall time with the faults marked. ``table`` is pure;
``plot`` imports matplotlib."""
from __future__ import annotations

__all__ = ["plot", "table"]


def _s(value) -> str:
    return "-" if value is None else f"{value:.1f}s"


def table(result: dict) -> str:
    """The report as text (O(faults))."""
    clean, hit = result["fault_free"], result["chaos"]
    lines = [f"chaos: {result['system']} on {result['topology']} "
             f"({result['workers_per_dc']} worker(s) per DC, sync {result['sync']}), a fault "
             f"every {result['every_s']:g}s for {result['duration_s']:g}s, seed "
             f"{result['seed']}",
             f"{'fault':<10} {'count':>5} {'next round med/max':>20} "
             f"{'within 10% med/max':>20} {'never':>6}"]
    for kind, row in result["by_kind"].items():
        lines.append(f"{kind:<10} {row['count']:>5} "
                     f"{_s(row['next_round_median_s']) + ' / ' + _s(row['next_round_max_s']):>20} "
                     f"{_s(row['steady_median_s']) + ' / ' + _s(row['steady_max_s']):>20} "
                     f"{row['never_steady']:>6}")
    for skipped in result.get("skipped", ()):
        lines.append(f"skipped: {skipped['kind']} {skipped['target']} at "
                     f"{skipped['at_s']:g}s: {skipped['why']}")
    ratio = result.get("goodput_ratio")
    lines.append(f"goodput: {hit['goodput']:.2f} samples/s against {clean['goodput']:.2f} "
                 f"fault-free ({'-' if ratio is None else f'{100 * ratio:.1f}%'}); "
                 f"wall {hit['wall_s']:.1f}s against {clean['wall_s']:.1f}s")
    if hit.get("skipped_steps"):
        lines.append(f"steps not in the model (DCs away from the run, not counted as "
                     f"useful): {hit['skipped_steps']}")
    lost = hit["lost_or_doubled"]
    audit = "no audit records" if lost["audit_mismatches"] is None else \
        f"{lost['audit_mismatches']} audit mismatches in {lost['audit_records']} audits"
    lines.append(f"lost or doubled updates: {lost['total']} ({audit}, "
                 f"{lost['replicas_differing']} replicas differing, {lost['steps_missing']} "
                 f"steps missing)")
    same = hit["weights_sha256"] is not None and hit["weights_sha256"] == clean["weights_sha256"]
    final = [r["final_quality"] for r in (clean, hit)]
    if None not in final:
        change = (final[1] - final[0]) / final[0] * 100 if final[0] else 0.0
        lines.append(f"final {hit['metric']}: {final[1]:.4f} against {final[0]:.4f} "
                     f"fault-free ({change:+.2f}%); final weights "
                     f"{'bit-identical' if same else 'differ'}")
    for what, figures in (("fault-free", clean), ("chaos", hit)):
        if figures["exit_code"]:
            lines.append(f"the {what} run FAILED (exit {figures['exit_code']})")
        for option, why in figures["recovery_refused"].items():
            if what == "chaos":
                lines.append(f"recovery option {option} not on: {why}")
    return "\n".join(lines)


def plot(result: dict, path: str) -> str:
    """Quality against seconds since the first step, both runs, the faults as vertical
    lines (labelled by kind, shaded while a stop or a cut lasts); returns ``path``."""
    import matplotlib    # noqa: PLC0415 (only for --plot)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt     # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(9, 5))
    for key, label in (("fault_free", "fault-free"), ("chaos", "with faults")):
        curve = result["curves"][key]
        if curve:
            ax.plot([p[0] for p in curve], [p[2] for p in curve], marker=".", label=label)
    colours = dict(zip(("server", "dc-stop", "link-cut", "worker", "scheduler"),
                       ("tab:red", "tab:purple", "tab:orange", "tab:green", "tab:brown")))
    first = result["chaos"].get("first_step_t")
    for fault in result["faults"]:
        at = fault["t"] - first if first else fault.get("at_s", 0)
        ax.axvline(at, color=colours.get(fault["kind"], "grey"), alpha=0.6, linestyle="--")
        if fault.get("length_s"):       # a stopped DC, a cut link: while it lasted
            ax.axvspan(at, at + fault["length_s"], color=colours.get(fault["kind"], "grey"),
                       alpha=0.1)
        ax.text(at, ax.get_ylim()[1], fault["kind"], rotation=90, va="top", fontsize=7)
    ax.set_xlabel("seconds since the first step")
    ax.set_ylabel(result["chaos"].get("metric") or "quality")
    ax.set_title(f"{result['system']} under chaos on {result['topology']}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
