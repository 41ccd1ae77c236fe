"""The workloads of ``bench.py --mode train`` (``--workload``): which model on which data,
judged by which metric, and the hyper-parameters a run uses unless told otherwise. Pure (no
MXNet): the benchmark resolves its flags here before any worker starts, and hands every
worker the resolved values, so all systems train with the same ones.

=============  =============  ================================  =====================
workload       model          data                              judged by
=============  =============  ================================  =====================
``mlp-digits``  ``mlp``        scikit-learn's digits (or IDX)    test accuracy (higher)
``cnn-digits``  ``cnn``        scikit-learn's digits (or IDX)    test accuracy (higher)
``lm``          ``transformer``  the Python documentation        validation loss (lower)
=============  =============  ================================  =====================
"""
from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["HYPER_PARAMETERS", "METRICS", "WORKLOADS", "Metric", "Workload", "resolve"]


@dataclass(frozen=True)
class Metric:
    """A quality figure and its direction."""

    name: str                   # as the JSON says it: "accuracy" or "loss"
    label: str                  # as the table and plot say it
    higher_is_better: bool

    def reached(self, value: float, target: float) -> bool:
        """Whether ``value`` is at the target or beyond it, in this metric's direction."""
        return value >= target if self.higher_is_better else value <= target


METRICS = {"accuracy": Metric("accuracy", "test accuracy", True),
           "loss": Metric("loss", "validation loss (nats/token)", False)}


@dataclass(frozen=True)
class Workload:
    name: str
    model: str
    data: str                   # --data unless given
    metric: str                 # a key of METRICS
    defaults: dict = field(default_factory=dict)    # hyper-parameter -> value unless given


_DIGITS = {"batch_size": 32, "optimizer": "sgd", "lr": 0.01, "eval_every": 5, "iters": 200}
WORKLOADS = {
    "mlp-digits": Workload("mlp-digits", "mlp", "digits", "accuracy",
                           {**_DIGITS, "hidden": 1024}),
    "cnn-digits": Workload("cnn-digits", "cnn", "digits", "accuracy",
                           {**_DIGITS, "hidden": 256}),
    "lm": Workload("lm", "transformer", "python-docs", "loss",
                   {"batch_size": 8, "optimizer": "adam", "lr": 0.001, "eval_every": 50,
                    "iters": 1000, "hidden": 128}),
}
HYPER_PARAMETERS = ("hidden", "batch_size", "optimizer", "lr", "eval_every", "iters")


def resolve(args) -> Workload:
    """Fill every hyper-parameter of ``args`` left None (and ``data``) with the workload's
    default; returns the workload."""
    workload = WORKLOADS[args.workload]
    if getattr(args, "data", None) is None:
        args.data = workload.data
    for name in HYPER_PARAMETERS:
        if getattr(args, name, None) is None:
            setattr(args, name, workload.defaults[name])
    return workload
