"""In-process stand-ins for netstorm.torch's unit tests: a :class:`Hub` of fake worker
clients, one per simulated worker, that answers pushes as the DC servers would (fsa: the
sum over every worker; hfa: the last value plus the average delta; diloco: the servers'
outer Nesterov step), with no socket and no thread. The simulated workers run in turn in
the test's thread: every worker pushes a round before any waits for it."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from netstorm.geoserver.config.sync import SyncConfig
from netstorm.geoserver.server.sync_modes import OuterNesterov
from netstorm.torch.session import Session


class Hub:
    def __init__(self, workers: int = 4, dcs: int = 2, sync: SyncConfig = SyncConfig()):
        self.sync = sync
        self.values: dict = {}      # key -> value after the latest round computed
        self.pushes: dict = {}      # (key, round) -> {rank: array}
        self.rounds: dict = {}      # (key, round) -> value after it
        self.outer = OuterNesterov(sync.outer_lr, sync.outer_momentum)
        per_dc = workers // dcs
        self.clients = [FakeClient(self, rank, f"dc{rank // per_dc}", rank % per_dc)
                        for rank in range(workers)]

    def sessions(self) -> list:
        return [Session(c) for c in self.clients]

    def value_after(self, key: int, rnd: int) -> np.ndarray:
        if rnd == 0:
            return self.values[(key, 0)]
        if (key, rnd) not in self.rounds:
            pushed = self.pushes.get((key, rnd), {})
            assert len(pushed) == len(self.clients), \
                f"key {key} round {rnd}: awaited before every worker pushed ({sorted(pushed)})"
            total = sum(pushed[r] for r in sorted(pushed))
            before = self.value_after(key, rnd - 1)
            mean = total / np.asarray(len(self.clients), total.dtype)
            if self.sync.mode == "fsa":
                value = total
            elif self.sync.mode == "hfa":
                value = before + mean
            else:
                value = self.outer.step(key, before, -mean)
            self.rounds[(key, rnd)] = value
        return self.rounds[(key, rnd)]


class FakeClient:
    """The part of :class:`~netstorm.geoserver.worker.client.WorkerClient` netstorm.torch
    uses."""

    def __init__(self, hub: Hub, rank: int, dc: str, local_rank: int):
        self.hub = hub
        self.me = SimpleNamespace(rank=rank, dc=dc, local_rank=local_rank)
        self.po = SimpleNamespace(table=SimpleNamespace(
            workers=lambda dc=None: [c.me for c in hub.clients if dc in (None, c.me.dc)]))
        self.keys: dict = {}        # key -> [shape, dtype, pushes]
        self.closed = None
        self.resumed_round = 0

    @property
    def num_workers(self) -> int:
        return len(self.hub.clients)

    @property
    def sync(self) -> SyncConfig:
        return self.hub.sync

    def init(self, key: int, value: np.ndarray) -> None:
        self.keys[key] = [value.shape, value.dtype, 0]
        if self.me.rank == 0:
            self.hub.values[(key, 0)] = np.array(value, copy=True).reshape(-1)
        assert (key, 0) in self.hub.values, f"key {key}: init before rank 0's"

    def start_push(self, key: int, grad: np.ndarray, want_value: bool):
        info = self.keys[key]
        assert grad.dtype == info[1] and grad.size == np.prod(info[0]), (key, grad.shape)
        info[2] += 1
        self.hub.pushes.setdefault((key, info[2]), {})[self.me.rank] = grad.copy()
        return (key, info[2])

    def start_pull(self, key: int):
        return (key, self.keys[key][2])

    def finish_into(self, key: int, handle, target: np.ndarray) -> None:
        assert handle[0] == key
        target[:] = self.hub.value_after(key, handle[1]).reshape(-1)

    def close(self, clean: bool = True, reason: str = "") -> None:
        self.closed = (clean, reason)


# ---------------------------------------------------------------- a model and its data
WORKERS, BATCH, STEPS = 4, 8, 5


def make_model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))


def batches(step):
    """Every worker's batch of ``step``: (inputs, labels) of WORKERS * BATCH rows."""
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(WORKERS * BATCH, 6, generator=g), \
        torch.randint(0, 3, (WORKERS * BATCH,), generator=g)


def train_alone(make_optimizer, steps=STEPS):
    """One process on all the rows: the averaged gradient of equal shards."""
    model = make_model()
    opt = make_optimizer(model)
    for step in range(steps):
        x, y = batches(step)
        opt.zero_grad()
        sum(torch.nn.functional.cross_entropy(model(x[r * BATCH:(r + 1) * BATCH]),
                                              y[r * BATCH:(r + 1) * BATCH])
            for r in range(WORKERS)).div(WORKERS).backward()
        opt.step()
    return model


def sgd(model):
    """SGD with momentum, the optimizer of most tests."""
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


