"""A benchmark's result as a table and as plots (PNG)."""
from __future__ import annotations

from pathlib import Path

from netstorm.geoserver.config.settings import DEFAULT_CHUNK_BYTES

from . import perf_profile
from .cpu import describe
from .link_table import summary as links_summary

__all__ = ["CPU_BOUND", "fapt_plan", "plot", "plot_trees", "table"]

CPU_BOUND = 0.85     # mean machine CPU use above which a run is flagged CPU-bound


def table(result: dict) -> str:
    bound = result["lower_bound_s"]
    lines = [f"topology={result['topology']} model={result['model']} "
             f"({result['model_bytes'] / 1e6:.1f} MB) mode={result['mode']} "
             f"workers/DC={result['workers_per_dc']} lower bound={bound:.3f}s",
             f"{'system':<16}{'median s':>10}{'mean s':>10}{'p90 s':>10}{'x bound':>9}"
             f"{'correct':>9}{'cpu':>7}  note"]
    for name, r in result["systems"].items():
        if not r.get("iter_s"):
            lines.append(f"{name:<16}{'-':>10}{'-':>10}{'-':>10}{'-':>9}{'NO':>9}{'':>7}  "
                         f"{r.get('error', 'failed')}")
            continue
        note = "CPU-bound: lower --bandwidth-scale" if r["cpu_util"] > CPU_BOUND else ""
        if r.get("busiest_links"):
            top = r["busiest_links"][0]
            note = (f"busiest {top['link']} {top['busy_s_per_iter']:.2f}s/iter incl. start-up"
                    + (f"; {note}" if note else ""))
        mean = f"{r['mean_s']:.3f}" if "mean_s" in r else "-"
        lines.append(f"{name:<16}{r['median_s']:>10.3f}{mean:>10}{r['p90_s']:>10.3f}"
                     f"{r['median_s'] / bound:>9.2f}{'yes' if r['correct'] else 'NO':>9}"
                     f"{100 * r['cpu_util']:>6.0f}%  {note}")
    plan = result.get("fapt_plan")
    if plan:
        roots = ", ".join(f"{t['root']}{' split' if 'down' in t else ''} "
                          f"{100 * t['share']:.0f}%" for t in plan["trees"])
        lines.append(f"netstorm-fapt trees: {roots}; time model predicted "
                     f"{plan['predicted_s']:.3f}s"
                     + (f" with framing, {plan['payload_predicted_s']:.3f}s without"
                        if "payload_predicted_s" in plan else "")
                     + (f" (shared trees only: {plan['shared_predicted_s']:.3f}s)"
                        if "shared_predicted_s" in plan else "")
                     + (f" (measured {100 * plan['prediction_error']:+.0f}% vs prediction)"
                        if "prediction_error" in plan else ""))
    for name, r in result["systems"].items():
        if r.get("cpu"):
            lines.append(f"{name} cpu: {describe(r['cpu'])}"
                         f"{'' if r['cpu']['steady_state'] else ' (whole run)'}; "
                         f"{r['cpu_s_per_model_gb']:.1f} CPU-s per model GB"
                         + (f"; links carried {r['wan_bytes_per_iter'] / 1e9:.3f} GB/iter"
                            if r.get("wan_bytes_per_iter") else ""))
        if r.get("cpu_profile"):
            lines.append(f"{name} where the CPU went (perf, CPU-s/iter): "
                         f"{perf_profile.describe(r['cpu_profile']['cpu_s_per_iter'])}")
    for name, r in result["systems"].items():
        if r.get("links"):
            lines.append(f"{name} busiest links over the measured iterations (per iteration):\n"
                         + links_summary(r["links"]))
        plane = r.get("dataplane")
        if plane:
            lines.append(f"{name} data plane: {plane['ran']} ({plane['source']}; configured "
                         f"{plane['configured']}"
                         + (f"; python because {', '.join(plane['python_reasons'])}"
                            if plane.get("python_reasons") else "") + ")")
    for name, r in result["systems"].items():
        aware = r.get("awareness")
        if aware:
            lines.append(f"{name} awareness: median estimate error "
                         f"{aware['awareness_median_rel_error']} over {aware['estimates']} "
                         f"estimates (largest over-estimate "
                         f"{aware.get('awareness_max_overestimate')}x, "
                         f"{aware.get('awareness_max_overestimate_settled')}x once "
                         f"settled; worst {aware.get('awareness_worst_overestimate')}); "
                         f"{aware['policy_switches']} policy switches; iterations "
                         f"to react per rate change: "
                         f"{[x['iterations'] for x in aware['reactions']]}")
        costs = r.get("round_costs")
        if costs:
            lines.append(f"{name} per round (time model at the emulator's rates): measured "
                         f"{costs['mean_measured_s']}s, policy in force worth "
                         f"{costs['mean_in_force_s']}s, best policy worth "
                         f"{costs['mean_best_s']}s (means)")
    names = [n for n, r in result["systems"].items() if r.get("iter_s")]
    fapt = result["systems"].get("netstorm-fapt", {})
    for a in ("netstorm-aware", "netstorm-full"):       # the awareness ablation
        r = result["systems"].get(a, {})
        if a in names and "netstorm-fapt" in names and "mean_s" in r and "mean_s" in fapt:
            lines.append(f"speed-up {a} over netstorm-fapt: "
                         f"{fapt['median_s'] / r['median_s']:.2f}x by median, "
                         f"{fapt['mean_s'] / r['mean_s']:.2f}x by mean s/iter")
    plain = result["systems"].get("netstorm-fapt-insecure", {})
    if "netstorm-fapt" in names and "netstorm-fapt-insecure" in names:
        lines.append(f"cost of CURVE (netstorm-fapt over netstorm-fapt-insecure): "
                     f"{fapt['median_s'] / plain['median_s']:.3f}x by median, "
                     f"{fapt['mean_s'] / plain['mean_s']:.3f}x by mean s/iter")
    for a in names:
        for b in names:
            if a != b and a.startswith("netstorm") and b.startswith("mxnet"):
                ratio = result["systems"][b]["median_s"] / result["systems"][a]["median_s"]
                # in train mode an iteration of a local-update system is not a synchronized
                # one: compare times to target (the quality table), not iterations
                if result.get("mode") == "train" and result["systems"][a].get("wan_round_iters"):
                    continue
                lines.append(f"speed-up {a} over {b}: {ratio:.2f}x"
                             + (" per iteration" if result.get("mode") == "train" else ""))
    return "\n".join(lines)


def fapt_plan(topology, nbytes: int, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> dict:
    """The trees the scheduler will choose for this topology (the same call it makes) and
    the time model's prediction for this model, to compare with the measured time:
    ``predicted_s`` at the emulator's rates, which count frames (payload at
    :data:`~netstorm.scheduler.planning.TCP_GOODPUT` of them), ``payload_predicted_s`` as
    the planner sees it (rates taken as payload rates; what earlier runs reported)."""
    from netstorm.scheduler.planning import (NOMINAL_MODEL_BYTES, TCP_GOODPUT,
                                             compute_policy, predict_iteration_s)

    def predicted(plan, goodput=TCP_GOODPUT):
        pairs = list(zip(plan.policy.trees, plan.shares))
        return round(predict_iteration_s(pairs, topology, nbytes, chunk_bytes, goodput), 4)
    plan = compute_policy(topology, NOMINAL_MODEL_BYTES, chunk_bytes=chunk_bytes)
    shared = compute_policy(topology, NOMINAL_MODEL_BYTES, chunk_bytes=chunk_bytes,
                            split=False)
    return {"trees": [{**t.to_json(), "share": round(s, 4)}
                      for t, s in zip(plan.policy.trees, plan.shares)],
            "predicted_s": predicted(plan), "payload_predicted_s": predicted(plan, 1.0),
            "goodput": round(TCP_GOODPUT, 4), "method": plan.method,
            "shared_predicted_s": predicted(shared)}   # netstorm-shared's trees


def plot_trees(plan: dict, topology, path: str) -> str:
    """One panel per tree of the FAPT policy: its edges over the link graph, root and share
    (a split tree: aggregation edges red, broadcast edges blue, arrows along the data)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import networkx as nx
    trees = plan["trees"]
    cols = min(3, len(trees))
    rows = (len(trees) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.8 * rows), squeeze=False)
    graph = topology.graph().to_undirected()
    pos = nx.spring_layout(graph, seed=1)
    for ax, tree in zip(axes.flat, trees):
        edges = [(c, p) for c, p in tree["parent"].items() if p is not None]
        nx.draw_networkx_edges(graph, pos, ax=ax, edge_color="#dddddd")
        if "down" in tree:
            down = [(p, c) for c, p in tree["down"].items() if p is not None]
            directed = nx.DiGraph(graph)
            for edgelist, color, rad in ((edges, "#d62728", 0.12), (down, "#1f77b4", -0.12)):
                nx.draw_networkx_edges(directed, pos, edgelist=edgelist, ax=ax, width=2.0,
                                       edge_color=color, arrows=True, arrowsize=12,
                                       connectionstyle=f"arc3,rad={rad}")
        else:
            nx.draw_networkx_edges(graph, pos, edgelist=edges, ax=ax, width=2.5,
                                   edge_color="#d62728")
        colors = ["#ff9896" if n == tree["root"] else "#9cc3e6" for n in graph.nodes]
        nx.draw_networkx_nodes(graph, pos, ax=ax, node_color=colors, node_size=500)
        nx.draw_networkx_labels(graph, pos, ax=ax, font_size=8)
        kind = " (split)" if "down" in tree else ""
        ax.set_title(f"root {tree['root']}{kind}: {100 * tree['share']:.0f}% of the model")
        ax.axis("off")
    for ax in list(axes.flat)[len(trees):]:
        ax.axis("off")
    fig.suptitle(f"netstorm-fapt trees on {topology.name} (grey: unused links; split trees: "
                 f"partial sums up in red, the total down in blue)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot(result: dict, topology, path: str) -> list:
    import matplotlib
    import matplotlib.ticker
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import networkx as nx
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, r in result["systems"].items():
        if r.get("iter_s"):
            ax.plot(range(1, len(r["iter_s"]) + 1), r["iter_s"], marker="o", label=name)
    ax.axhline(result["lower_bound_s"], color="k", linestyle="--", label="lower bound")
    ax.set_xlabel("iteration (after warm-up)")
    ax.set_ylabel("seconds")
    ax.set_ylim(bottom=0)
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set_title(f"{result['model']} {result['mode']} on {result['topology']}, "
                 f"{result['workers_per_dc']} worker(s)/DC")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    topo_path = str(Path(path).with_name(Path(path).stem + "-topology.png"))
    fig, ax = plt.subplots(figsize=(6, 5))
    graph = topology.graph().to_undirected()
    pos = nx.spring_layout(graph, seed=1)
    nx.draw_networkx(graph, pos, ax=ax, node_color="#9cc3e6", node_size=900)
    labels = {(l.a, l.b): f"{l.mbps_ab:.0f}/{l.mbps_ba:.0f}" for l in topology.links}
    nx.draw_networkx_edge_labels(graph, pos, edge_labels=labels, ax=ax, font_size=8)
    ax.set_title(f"{topology.name}: link rates, Mbit/s (a->b / b->a)")
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(topo_path, dpi=120)
    plt.close(fig)
    paths = [path, topo_path]
    if "fapt_plan" in result:
        paths.append(plot_trees(result["fapt_plan"], topology,
                                str(Path(path).with_name(Path(path).stem + "-trees.png"))))
    return paths
