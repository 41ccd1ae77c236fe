"""What a benchmark run measured: iteration times from the workers' files, the machine's CPU
use, the busiest links, the model's size."""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psutil

from .accuracy import apply_target, summarize

__all__ = ["CpuSampler", "busiest_links", "collect", "model_bytes"]


@dataclass
class CpuSampler:
    """Samples the machine's CPU use (0..1) every ``period_s`` in a background thread."""

    period_s: float = 0.5
    samples: list = field(default_factory=list)

    def __enter__(self):
        self._stop = threading.Event()
        psutil.cpu_percent(None)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.wait(self.period_s):
            self.samples.append(psutil.cpu_percent(None) / 100.0)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    @property
    def mean(self) -> float:
        return float(np.mean(self.samples)) if self.samples else 0.0


def collect(out: Path, mode: str, target: float | None = None, same_weights=True) -> dict:
    """Merge the workers' JSON files: an iteration lasts until its slowest worker is done.
    In train mode, also the quality figures (:func:`netstorm.bench.accuracy.summarize`; with
    a ``target``, :func:`~netstorm.bench.accuracy.apply_target`);
    a run is correct when every worker ends with the same weights, or (``same_weights``
    false: sync modes whose workers legitimately differ at the end) when every worker
    finished; ``weights_identical`` says which it was."""
    ranks = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]
    if not ranks or len(ranks) != ranks[0]["num_workers"]:
        return {"iter_s": [], "correct": False, "error": f"{len(ranks)} worker results"}
    slowest = np.max(np.array([r["iter_s"] for r in ranks]), axis=0)
    per_iter = slowest[1:]                                                  # drop warm-up
    times = {}
    if mode == "comm":
        correct = all(r["exact_sums"] for r in ranks)
        if all("iter_start_monotonic" in r for r in ranks):    # every iteration, warm-up too
            times = {"_iter_start": np.min([r["iter_start_monotonic"] for r in ranks],
                                           axis=0).tolist(),
                     "_iter_all_s": slowest.tolist()}
    else:
        identical = len({r["weights_sha256"] for r in ranks}) == 1
        correct = identical or not same_weights
        times = {**apply_target(summarize(ranks), target), "weights_identical": identical}
    return {"iter_s": [round(float(t), 4) for t in per_iter],
            "median_s": round(float(np.median(per_iter)), 4),
            "mean_s": round(float(np.mean(per_iter)), 4),
            "p90_s": round(float(np.percentile(per_iter, 90)), 4), "correct": bool(correct),
            "model_bytes": ranks[0]["model_bytes"], **times}


def busiest_links(before: dict, after: dict, topology, iterations: int, top: int = 3) -> list:
    """Where the time went: each link direction's busy seconds per iteration (bytes it sent
    during the run / its rate / iterations, so start-up traffic is spread in), busiest
    first. Compare with the iteration time: a busiest link near it is saturated."""
    busy = []
    for (a, b), sent in after.items():
        rate = topology.rate(a, b)
        if sent is None or before.get((a, b)) is None or rate <= 0:
            continue
        seconds = (sent - before[(a, b)]) * 8 / (rate * 1e6) / iterations
        busy.append({"link": f"{a}->{b}", "mbps": rate, "busy_s_per_iter": round(seconds, 3)})
    return sorted(busy, key=lambda x: -x["busy_s_per_iter"])[:top]


def model_bytes(model: str) -> int:
    """The fp32 gradient bytes of the gluon model_zoo model ``model`` (comm mode)."""
    import mxnet as mx
    from mxnet import gluon

    from .training import gradient_bytes     # imports MXNet, as this does
    net = gluon.model_zoo.vision.get_model(model, pretrained=False)
    net.initialize()
    size = 299 if model.startswith("inception") else 224
    net(mx.nd.zeros((1, 3, size, size)))
    return gradient_bytes(net)
