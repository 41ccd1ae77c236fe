"""netstorm.torch.optimizer: DistributedOptimizer on simulated workers (tests/torch_fakes.py)
against one process training on every worker's data, and its errors."""
import copy

import pytest
import torch

from netstorm.geoserver.config.sync import SyncConfig
from netstorm.torch import DistributedOptimizer, TorchSessionError
from torch_fakes import BATCH, STEPS, WORKERS, Hub, batches, make_model, sgd, train_alone

def train_distributed(hub, make_optimizer, steps=STEPS, **kwargs):
    models = [make_model() for _ in hub.clients]
    opts = [DistributedOptimizer(make_optimizer(m), m.named_parameters(), session=s, **kwargs)
            for m, s in zip(models, hub.sessions())]
    for step in range(steps):
        x, y = batches(step)
        for rank, (m, o) in enumerate(zip(models, opts)):
            o.zero_grad()
            rows = slice(rank * BATCH, (rank + 1) * BATCH)
            torch.nn.functional.cross_entropy(m(x[rows]), y[rows]).backward()
        for o in opts:
            o.step()
    return models, opts


def assert_same_weights(models, want, atol=1e-6):
    for rank, m in enumerate(models):
        for (name, got), (_, expected) in zip(m.named_parameters(), want.named_parameters()):
            torch.testing.assert_close(got, expected, rtol=0, atol=atol,
                                       msg=f"rank {rank} {name}")


@pytest.mark.parametrize("make_optimizer", [
    sgd, lambda m: torch.optim.Adam(m.parameters(), lr=0.01)], ids=["sgd", "adam"])
def test_every_worker_ends_with_the_weights_of_one_process_on_all_the_data(make_optimizer):
    models, _ = train_distributed(Hub(WORKERS), make_optimizer)
    want = train_alone(make_optimizer)
    assert not torch.equal(want[0].weight, make_model()[0].weight), "never trained"
    assert_same_weights(models, want)


def test_the_optimizer_keeps_its_object_class_and_state_and_takes_a_scheduler():
    hub = Hub(WORKERS)
    model = make_model()
    inner = sgd(model)
    opt = DistributedOptimizer(inner, model.named_parameters(), session=hub.sessions()[0])
    assert opt is inner and isinstance(opt, torch.optim.SGD)
    torch.optim.lr_scheduler.StepLR(opt, step_size=1)       # isinstance check passes


def test_gradients_are_pushed_during_backward_in_hook_order_and_keys_in_forward_order():
    hub = Hub(1, dcs=1)
    model = make_model()
    DistributedOptimizer(sgd(model), model.named_parameters(), session=hub.sessions()[0])
    x, y = batches(0)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    assert sorted(hub.pushes) == [(k, 1) for k in range(4)]   # all four before step()
    assert list(hub.clients[0].keys) == [0, 1, 2, 3]


def test_an_unused_parameter_is_pushed_as_zeros_so_rounds_stay_aligned():
    hub = Hub(2, dcs=1)
    models = [make_model() for _ in range(2)]
    opts = [DistributedOptimizer(sgd(m), m.named_parameters(), session=s)
            for m, s in zip(models, hub.sessions())]
    x, _ = batches(0)
    models[0](x).sum().backward()               # rank 0 uses the whole model
    models[1][0](x).sum().backward()            # rank 1 only the first layer
    for o in reversed(opts):    # rank 1 pushes its zeros before rank 0 waits for them
        o.step()
    for m in models:
        assert m[2].weight.grad is not None
    torch.testing.assert_close(models[1][2].weight.grad, models[0][2].weight.grad)


def test_synchronize_then_step_pushes_once_clipping_in_between():
    hub = Hub(2, dcs=1)
    models, opts = train_distributed(hub, sgd, steps=0)
    x, y = batches(0)
    for rank, (m, o) in enumerate(zip(models, opts)):
        torch.nn.functional.cross_entropy(m(x[rank::2]), y[rank::2]).backward()
    for m, o in zip(models, opts):
        o.synchronize()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 0.01)
        o.step()
    assert max(rnd for _, rnd in hub.pushes) == 1
    assert_same_weights(models[1:], models[0], atol=0)


def test_backward_passes_per_step_accumulates_before_one_push():
    hub = Hub(2, dcs=1)
    models, opts = train_distributed(hub, sgd, steps=0, backward_passes_per_step=2)
    x, y = batches(0)
    for rank, (m, o) in enumerate(zip(models, opts)):
        torch.nn.functional.cross_entropy(m(x[:4]), y[:4]).backward()
        assert all(rank not in pushed for pushed in hub.pushes.values())
        torch.nn.functional.cross_entropy(m(x[4:8]), y[4:8]).backward()
    assert len(hub.pushes) == 4
    for o in opts:
        o.step()


@pytest.mark.parametrize("mode,names", [("hfa", "LocalUpdates"), ("mixed", "does not serve")])
def test_other_sync_modes_are_refused_naming_what_to_use(mode, names):
    sync = SyncConfig(mode=mode) if mode != "mixed" else SyncConfig(mode="mixed", staleness=1)
    model = make_model()
    with pytest.raises(TorchSessionError, match=names):
        DistributedOptimizer(sgd(model), model.named_parameters(),
                             session=Hub(2, dcs=1, sync=sync).sessions()[0])


def test_bad_arguments_are_clear_errors():
    session = Hub(2, dcs=1).sessions()[0]
    model = make_model()
    with pytest.raises(TorchSessionError, match="session="):
        DistributedOptimizer(sgd(model), model.named_parameters())
    with pytest.raises(TorchSessionError, match="not in named_parameters"):
        DistributedOptimizer(sgd(model), list(model.named_parameters())[:2], session=session)
    with pytest.raises(TorchSessionError, match="twice"):
        named = list(model.named_parameters())
        DistributedOptimizer(sgd(model), named + named[:1], session=session)
    with pytest.raises(TorchSessionError, match="backward_passes_per_step"):
        DistributedOptimizer(sgd(model), session=session, backward_passes_per_step=0)
    bf16 = copy.deepcopy(model).to(torch.bfloat16)
    with pytest.raises(TypeError, match="bfloat16 cannot travel"):
        DistributedOptimizer(sgd(bf16), bf16.named_parameters(), session=session)
