"""LocalSteps: the worker's side of hfa, esync and diloco, with a stand-in for the push operator."""
import mxnet as mx
import pytest

from netstorm.geoserver.config.sync import SyncConfig
from netstorm.kvstore.local_steps import LocalSteps, LocalStepsError, fragments_of, resumed_steps


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


def test_diloco_pushes_every_h_steps_like_hfa_with_k1_of_h():
    server = Server()
    local = make("diloco", server, h=3)
    for _ in range(6):
        local.step(0, mx.nd.array([1.0, -1.0]))
    assert [d.tolist() for d in server.pushed] == [[-1.5, 1.5]] * 2
    assert local.keys[0].weights.asnumpy().tolist() == [-2.0, 5.0]


def test_fragments_cut_the_keys_in_order_into_runs_of_about_equal_size():
    assert fragments_of({0: 10, 1: 10, 2: 10, 3: 10}, 2) == {0: 0, 1: 0, 2: 1, 3: 1}
    assert fragments_of({5: 100, 1: 1, 2: 1}, 3) == {1: 0, 2: 0, 5: 0}
    assert fragments_of({0: 1, 1: 1, 2: 1}, 1) == {0: 0, 1: 0, 2: 0}


def test_streaming_fragments_leave_at_staggered_steps_and_merge_after_the_delay():
    """h = 4, 2 fragments (key 0 at steps 4, 8; key 1 at 2, 6), delay 1, mix 0.5: the
    value pushed at step s is mixed in after step s + 1, and the next delta starts from it."""
    server = Server()
    local = LocalSteps(SyncConfig(mode="diloco", h=4, fragments=2, delay=1, mix=0.5),
                       server, server.push_value)
    local.set_optimizer(mx.optimizer.SGD(learning_rate=1.0))
    for key in (0, 1):
        server.value[key] = mx.nd.array([0.0])
        local.start(key, server.value[key].copy())
    pushes = []
    for step in range(1, 9):
        for key in (0, 1):
            before = len(server.pushed)
            local.step(key, mx.nd.array([-1.0]))      # every step adds 1 to the weight
            if len(server.pushed) > before:
                pushes.append((step, key))
    assert pushes == [(2, 1), (4, 0), (6, 1), (8, 0)]
    # key 1: pushed 2 at step 2 (server: 2); step 3 the weight is 3, mixed with 2 -> 2.5;
    # steps 4..6 add 3 -> 5.5, pushed delta 5.5 - 2 = 3.5 at step 6 (server: 5.5)
    assert [d.tolist() for d in server.pushed] == [[2.0], [4.0], [3.5], [3.5]]   # key 0 alike
    assert local.keys[1].pending is None         # step 6's value was mixed in after step 7
    assert local.keys[1].base.asnumpy().tolist() == [5.5]
    assert local.keys[0].pending is not None     # step 8's value waits for step 9


def test_wait_inner_steps_waits_for_the_optimizer_outputs_only_and_forgets_them():
    server = Server()
    local = make("diloco", server, h=2)
    local.step(0, mx.nd.array([1.0, -1.0]))
    first = local._updated[0]
    local.step(0, mx.nd.array([1.0, -1.0]))      # the second step synchronizes
    assert list(local._updated) == [0]           # one array per key: nothing accumulates
    assert local._updated[0] is first            # the updater writes in place
    assert local._updated[0] is not local.keys[0].weights   # the synchronized copy is apart
    local.wait_inner_steps()
    assert local._updated == {}


def test_a_restarted_worker_resumes_at_its_ranks_last_synchronization():
    """docs/recovery-localrestart.md: a worker restarted after its rank's 2nd diloco round
    (h = 3) takes the DC's model after it as weights and base, counts its steps from 6, and
    synchronizes after 3 steps of a fresh inner optimizer (momentum from zero): the first
    delta it pushes is the one a fresh process would push from that model."""
    server = Server()
    server.value[0] = mx.nd.array([4.0, 8.0])       # the DC's model after round 2
    local = LocalSteps(SyncConfig(mode="diloco", h=3), server, server.push_value)
    local.set_optimizer(mx.optimizer.SGD(learning_rate=0.5, momentum=0.5))
    local.start(0, server.value[0].copy(), rounds=2)
    state = local.keys[0]
    assert (state.steps, state.synced_at, state.rounds) == (6, 6, 2)
    for step in range(7, 10):
        local.step(0, mx.nd.array([1.0, -1.0]))
        assert len(server.pushed) == (step == 9)
    # fresh momentum 0.5: steps of 0.5, 0.75, 0.875 (x -grad)
    assert server.pushed[0].tolist() == [-2.125, 2.125]
    assert (state.steps, state.rounds) == (9, 3)
    assert state.base.asnumpy().tolist() == [1.875, 10.125]


def test_resumed_steps_are_rounds_times_the_steps_per_round_where_those_are_fixed():
    assert resumed_steps(SyncConfig(mode="diloco", h=5), 4) == 20
    assert resumed_steps(SyncConfig(mode="hfa", k1=3), 4) == 12
    assert resumed_steps(SyncConfig(mode="fsa"), 4) == 4
    assert resumed_steps(SyncConfig(mode="esync"), 0) == 0
    with pytest.raises(LocalStepsError, match="'esync': a worker restarted after 2"):
        resumed_steps(SyncConfig(mode="esync"), 2)
    with pytest.raises(LocalStepsError, match="'diloco': a worker restarted after 1"):
        resumed_steps(SyncConfig(mode="diloco", h=4, fragments=2), 1)
