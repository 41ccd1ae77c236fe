"""netstorm.torch.local_updates: hfa and diloco around an inner optimizer, on simulated
workers (tests/torch_fakes.py): with H = 1 they equal the synchronous optimizer."""
import pytest
import torch

from netstorm.geoserver.config.sync import SyncConfig
from netstorm.torch import LocalUpdates, TorchSessionError
from torch_fakes import BATCH, WORKERS, Hub, batches, make_model, sgd, train_alone


def train_local(hub, steps=5, seeds=None):
    models = [make_model(seed) for seed in (seeds or [0] * len(hub.clients))]
    opts = [LocalUpdates(sgd(m), m.named_parameters(), session=s)
            for m, s in zip(models, hub.sessions())]
    synced = []
    for step in range(steps):
        x, y = batches(step)
        for rank, (m, o) in enumerate(zip(models, opts)):
            o.zero_grad()
            rows = slice(rank * BATCH, (rank + 1) * BATCH)
            torch.nn.functional.cross_entropy(m(x[rows]), y[rows]).backward()
            o.inner.step()
        due = []
        for o in opts:          # each worker's step: its inner step above, then the sync
            o.steps += 1
            if o.steps % o.every == 0:
                due.append((o, o.start_sync()))     # every worker pushes before any waits
        for o, started in due:
            o.finish_sync(started)
            synced.append(step)
    return models, opts, synced


@pytest.mark.parametrize("sync", [SyncConfig(mode="hfa", k1=1, k2=1),
                                  SyncConfig(mode="diloco", h=1, outer_lr=1.0,
                                             outer_momentum=0.0)], ids=["hfa", "diloco"])
def test_one_local_step_per_round_equals_the_synchronous_optimizer(sync):
    models, _, _ = train_local(Hub(WORKERS, sync=sync))
    want = train_alone(sgd)
    for rank, m in enumerate(models):
        for (name, got), (_, expected) in zip(m.named_parameters(), want.named_parameters()):
            torch.testing.assert_close(got, expected, rtol=0, atol=1e-6,
                                       msg=f"rank {rank} {name}")


def test_workers_start_from_rank_0s_weights_and_agree_after_each_round_only():
    hub = Hub(WORKERS, sync=SyncConfig(mode="hfa", k1=2, k2=1))
    models, opts, synced = train_local(hub, steps=3, seeds=range(WORKERS))
    assert opts[0].rounds == 1 and synced == [1] * WORKERS
    assert not torch.equal(models[0][0].weight, models[1][0].weight)   # a local step since
    models, opts, _ = train_local(Hub(WORKERS, sync=SyncConfig(mode="hfa", k1=2, k2=1)),
                                  steps=4, seeds=range(WORKERS))
    for m in models[1:]:
        assert torch.equal(m[0].weight, models[0][0].weight)


def test_step_runs_the_inner_step_and_says_when_it_synchronized():
    hub = Hub(1, dcs=1, sync=SyncConfig(mode="diloco", h=2))
    model = make_model()
    opt = LocalUpdates(sgd(model), model.named_parameters(), session=hub.sessions()[0])
    x, y = batches(0)
    results = []
    for _ in range(4):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        results.append(opt.step())
    assert results == [False, True, False, True] and opt.rounds == 2


@pytest.mark.parametrize("sync,match", [
    (SyncConfig(), "use netstorm.torch.DistributedOptimizer"),
    (SyncConfig(mode="diloco", h=4, fragments=2), "streaming DiLoCo")])
def test_modes_it_does_not_serve_are_refused(sync, match):
    model = make_model()
    with pytest.raises(TorchSessionError, match=match):
        LocalUpdates(sgd(model), model.named_parameters(),
                     session=Hub(1, dcs=1, sync=sync).sessions()[0])
