"""Optimizer specs: the servers' replica follows exactly what MXNet's updater does."""
import json

import mxnet as mx
import numpy as np
import pytest
from netstorm.geoserver.model.optimizer_host import (
    OptimizerHost,
    OptimizerSpecError,
    optimizer_spec,
    states_from_wire,
    states_to_wire,
)


def _reference_and_host(optimizer):
    spec = json.loads(json.dumps(optimizer_spec(optimizer)))   # must survive JSON
    return mx.optimizer.get_updater(optimizer), OptimizerHost(spec)


@pytest.mark.parametrize("name,params", [
    ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3, "rescale_grad": 0.25}),
    ("adam", {"learning_rate": 0.01, "beta1": 0.8, "clip_gradient": 0.5}),
    ("nag", {"learning_rate": 0.05, "momentum": 0.7}),
    ("sgd", {"learning_rate": 0.1, "lr_scheduler": mx.lr_scheduler.FactorScheduler(2, 0.5)}),
])
def test_server_updates_match_mxnet_updater(name, params):
    ref, host = _reference_and_host(mx.optimizer.create(name, **params))
    rng = np.random.RandomState(0)
    w_ref = mx.nd.array(rng.randn(4, 3))
    w_host = w_ref.asnumpy()
    for _ in range(5):
        g = rng.randn(4, 3).astype(np.float32)
        ref(3, mx.nd.array(g), w_ref)
        w_host = host.update(3, g, w_host.reshape(4, 3)).reshape(4, 3)
    np.testing.assert_array_equal(w_host, w_ref.asnumpy())


def test_lr_and_wd_multipliers_travel():
    opt = mx.optimizer.create("sgd", learning_rate=1.0, wd=0.5)
    opt.idx2name = {0: "fc_weight", 1: "fc_bias"}
    opt.set_wd_mult({})
    opt.set_lr_mult({"fc_weight": 0.5})
    ref, host = _reference_and_host(opt)
    for index in (0, 1):
        w = mx.nd.ones((2,))
        ref(index, mx.nd.ones((2,)), w)
        got = host.update(index, np.ones(2, np.float32), np.ones(2, np.float32))
        np.testing.assert_array_equal(got, w.asnumpy())


def test_custom_optimizer_is_refused_with_advice():
    class MyOpt(mx.optimizer.SGD):
        pass
    with pytest.raises(OptimizerSpecError, match="update_on_kvstore=False"):
        optimizer_spec(MyOpt())


def test_unknown_name_is_refused():
    with pytest.raises(OptimizerSpecError, match="cannot build optimizer"):
        OptimizerHost({"name": "no-such-optimizer", "attrs": {}})


def test_states_roundtrip_without_pickle():
    states = {0: mx.nd.array([1.0, 2.0]), 3: (mx.nd.ones((2, 2)), mx.nd.zeros((1,), dtype="float16")),
              5: None}
    meta, frames = states_to_wire(states, {0: 4, 3: 2}, 4)
    json.dumps(meta)
    assert all(isinstance(f, np.ndarray) and f.dtype == np.uint8 for f in frames)
    got, counts, num_update = states_from_wire(json.loads(json.dumps(meta)),
                                               [f.tobytes() for f in frames],
                                               lambda a: mx.nd.array(a, dtype=a.dtype))
    assert counts == {0: 4, 3: 2} and num_update == 4 and got[5] is None
    np.testing.assert_array_equal(got[0].asnumpy(), [1, 2])
    assert got[3][1].dtype == np.float16 and got[3][0].shape == (2, 2)


def test_malformed_states_are_an_error_not_a_crash():
    with pytest.raises(OptimizerSpecError, match="malformed optimizer states"):
        states_from_wire({"states": [[0, {"frame": 7, "shape": [1], "dtype": "f4"}]],
                          "counts": [], "num_update": 0}, [], np.asarray)


def test_dcasgd_step_equals_mxnets_given_the_weights_the_gradient_was_computed_on():
    """mixed: each update is compensated against the weights it was computed on; the step
    is MXNet's DCASGD.update with its previous_weight state set to those weights."""
    params = {"learning_rate": 0.1, "lamda": 0.5, "wd": 1e-3}
    host = OptimizerHost(json.loads(json.dumps(optimizer_spec(
        mx.optimizer.create("dcasgd", **params)))))
    ref = mx.optimizer.create("dcasgd", **params)
    rng = np.random.RandomState(1)
    w_ref = mx.nd.array(rng.randn(4, 3))
    state = ref.create_state(5, w_ref)
    w_host = w_ref.asnumpy()
    for _ in range(4):
        g = rng.randn(4, 3).astype(np.float32)
        then = (w_host + rng.randn(4, 3) * 0.5).astype(np.float32)   # stale
        state[1][:] = mx.nd.array(then)
        ref.update(5, w_ref, mx.nd.array(g), state)
        plain = OptimizerHost(json.loads(json.dumps(optimizer_spec(
            mx.optimizer.create("dcasgd", **params))))).update(5, g, w_host).reshape(4, 3)
        w_host = host.update(5, g, w_host, computed_on=then).reshape(4, 3)
        assert np.array_equal(w_host, w_ref.asnumpy())
        assert not np.allclose(w_host, plain)       # the compensation did something


def test_dcasgd_with_momentum_is_refused_because_mxnet_191_cannot_run_it():
    """MXNet 1.9.1's DCASGD.update tests ``if mom:`` on an NDArray, which raises for any
    weight of more than one element: refused when the optimizer is set, not mid-run."""
    spec = json.loads(json.dumps(optimizer_spec(mx.optimizer.create("dcasgd", momentum=0.9))))
    with pytest.raises(OptimizerSpecError, match=r"DCASGD with momentum=0.9 .*momentum=0"):
        OptimizerHost(spec)


def test_a_sparse_gradient_updates_only_its_rows_as_mxnet_lazy_update_does():
    """SGD with momentum and weight decay: rows a row_sparse gradient does not touch keep
    their weight (MXNet's lazy update); the rows it touches match MXNet's own step."""
    opt = mx.optimizer.create("sgd", learning_rate=0.1, momentum=0.9, wd=0.1)
    ref, host = _reference_and_host(opt)
    w_ref = mx.nd.ones((4, 3))
    w_host = w_ref.asnumpy()
    g = np.zeros((4, 3), np.float32)
    g[[1, 3]] = [[1, 2, 3], [-1, 0.5, 2]]
    for _ in range(3):
        ref(2, mx.nd.array(g).tostype("row_sparse"), w_ref)
        w_host = host.update(2, g, w_host, sparse=True).reshape(4, 3)
    np.testing.assert_array_equal(w_host, w_ref.asnumpy())
    assert np.array_equal(w_host[[0, 2]], np.ones((2, 3)))
    dense = _reference_and_host(mx.optimizer.create("sgd", learning_rate=0.1, momentum=0.9,
                                                    wd=0.1))[1]
    assert not np.array_equal(dense.update(2, g, np.ones((4, 3), np.float32))[:3], np.ones(3))
