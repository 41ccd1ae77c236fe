"""netstorm.torch.broadcast: rank 0's parameters and optimizer state on every simulated
worker (tests/torch_fakes.py)."""
import pytest
import torch

from netstorm.torch import TorchSessionError, broadcast_optimizer_state, broadcast_parameters
from torch_fakes import Hub


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))


def test_every_worker_gets_rank_0s_parameters_and_buffers_of_every_dtype():
    hub = Hub(3, dcs=1)
    models = [make_model(seed) for seed in range(3)]
    models[0][1].num_batches_tracked += 7             # an int64 buffer
    assert not torch.equal(models[0][0].weight, models[1][0].weight)
    for m, s in zip(models, hub.sessions()):
        broadcast_parameters(m.state_dict(), s)
    for m in models[1:]:
        for (name, got), want in zip(m.state_dict().items(), models[0].state_dict().values()):
            assert torch.equal(got, want), name
    assert len(hub.values) == 3         # the layout digest, float32, int64: one key each


def test_named_parameters_work_too_and_each_call_takes_fresh_keys():
    hub = Hub(2, dcs=1)
    models, sessions = [make_model(seed) for seed in range(2)], hub.sessions()
    for _ in range(2):
        for m, s in zip(models, sessions):
            broadcast_parameters(m.named_parameters(), s)
    assert torch.equal(models[1][0].weight, models[0][0].weight)
    assert len(hub.values) == 4


def stepped_optimizer(model, lr, seed):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    torch.manual_seed(seed)
    model(torch.randn(5, 4)).sum().backward()
    opt.step()
    return opt


def test_every_worker_gets_rank_0s_optimizer_state_and_options():
    hub = Hub(2, dcs=1)
    models = [make_model(0) for _ in range(2)]
    opts = [stepped_optimizer(m, lr, seed) for m, lr, seed in zip(models, (0.1, 0.5), (1, 2))]
    before = opts[1].state_dict()
    for o, s in zip(opts, hub.sessions()):
        broadcast_optimizer_state(o, s)
    want, got = opts[0].state_dict(), opts[1].state_dict()
    assert got["param_groups"][0]["lr"] == 0.1 and isinstance(got["param_groups"][0]["lr"],
                                                              float)
    assert got["param_groups"][0]["betas"] == before["param_groups"][0]["betas"]  # a tuple
    for index, state in want["state"].items():
        for name, value in state.items():
            assert torch.equal(got["state"][index][name], value), (index, name)


def test_an_optimizer_that_never_stepped_broadcasts_its_options():
    hub = Hub(2, dcs=1)
    opts = [torch.optim.SGD(make_model(0).parameters(), lr=lr) for lr in (0.1, 0.3)]
    for o, s in zip(opts, hub.sessions()):
        broadcast_optimizer_state(o, s)
    assert opts[1].param_groups[0]["lr"] == 0.1


def test_a_worker_whose_tensors_differ_from_rank_0s_is_told_so():
    hub = Hub(2, dcs=1)
    s0, s1 = hub.sessions()
    broadcast_parameters({"a": torch.zeros(3)}, s0)
    with pytest.raises(TorchSessionError, match="rank 1's tensors differ from rank 0's"):
        broadcast_parameters({"a": torch.zeros(4)}, s1)


def test_only_rank_0_is_a_root():
    with pytest.raises(TorchSessionError, match="from rank 0"):
        broadcast_parameters({}, Hub(2, dcs=1).sessions()[0], root_rank=1)
