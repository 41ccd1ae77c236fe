"""netstorm.bench.workloads: the metrics' directions and the workloads' defaults."""
from types import SimpleNamespace

from netstorm.bench.workloads import HYPER_PARAMETERS, METRICS, WORKLOADS, resolve


def test_accuracy_is_reached_from_below_and_loss_from_above():
    accuracy, loss = METRICS["accuracy"], METRICS["loss"]
    assert accuracy.higher_is_better and not loss.higher_is_better
    assert accuracy.reached(0.95, 0.95) and accuracy.reached(0.96, 0.95)
    assert not accuracy.reached(0.94, 0.95)
    assert loss.reached(4.0, 4.0) and loss.reached(3.9, 4.0) and not loss.reached(4.1, 4.0)


def test_resolve_fills_only_what_was_left_unset():
    args = SimpleNamespace(workload="lm", data=None, lr=0.01, **{
        k: None for k in HYPER_PARAMETERS if k != "lr"})
    assert resolve(args) is WORKLOADS["lm"]
    assert args.lr == 0.01 and args.optimizer == "adam" and args.data == "python-docs"
    assert all(getattr(args, k) is not None for k in HYPER_PARAMETERS)
    for workload in WORKLOADS.values():
        assert set(workload.defaults) == set(HYPER_PARAMETERS)
        assert workload.metric in METRICS
