"""LocalSteps: the worker's side of hfa and esync, with a stand-in for the push operator."""
import mxnet as mx
import pytest

from netstorm.geoserver.config.sync import SyncConfig
from netstorm.kvstore.local_steps import LocalSteps, LocalStepsError


class Server:
    """Answers a pushed delta with base + delta (one worker's DC, one DC); counts pushes.
    Under esync, says ``steps[r]`` local steps after round r."""

    def __init__(self, steps=None):
        self.pushed, self.steps = [], steps or {}
        self.value = {}

    def push_value(self, key, delta):
        self.pushed.append(delta.asnumpy().copy())
        self.value[key] = self.value[key] + delta
        return self.value[key].copy()

    def steps_after(self, rnd):
        return self.steps.get(rnd, 1)


def make(mode, server, **params):
    local = LocalSteps(SyncConfig(mode=mode, **params), server, server.push_value)
    local.set_optimizer(mx.optimizer.SGD(learning_rate=0.5))
    server.value[0] = mx.nd.array([1.0, 2.0])
    local.start(0, server.value[0].copy())
    return local


def test_hfa_pushes_the_delta_of_k1_steps_and_takes_the_synchronized_weights():
    server = Server()
    local = make("hfa", server, k1=3)
    out = mx.nd.zeros(2)
    for step in range(1, 7):
        local.step(0, mx.nd.array([1.0, -1.0]), [out])
        assert len(server.pushed) == step // 3
    # two synchronizations, each carrying three SGD steps of -0.5 * grad
    assert [d.tolist() for d in server.pushed] == [[-1.5, 1.5]] * 2
    assert out.asnumpy().tolist() == [-2.0, 5.0] == local.keys[0].base.asnumpy().tolist()
    assert local.keys[0].rounds == 2


def test_esync_synchronizes_after_the_steps_the_server_gave():
    server = Server(steps={1: 3})           # 1 step before round 1, then 3
    local = make("esync", server)
    for _ in range(4):
        local.step(0, mx.nd.array([1.0, 1.0]))
    assert len(server.pushed) == 2 and local.keys[0].rounds == 2
    assert server.pushed[1].tolist() == [-1.5, -1.5]


def test_a_store_without_the_optimizer_is_refused_at_the_first_step():
    local = LocalSteps(SyncConfig(mode="hfa"), Server(), Server().push_value)
    with pytest.raises(LocalStepsError, match="update_on_kvstore=True"):
        local.step(0, mx.nd.array([1.0]))
    with pytest.raises(LocalStepsError, match="no optimizer set"):
        local.save_states(False)
