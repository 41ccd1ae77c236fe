"""kvstore.server_states: a checkpoint of the servers' keys and optimizer, and MXNet-format
optimizer states, as a worker writes and reads them (the servers stood in for)."""
from types import SimpleNamespace

import numpy as np
import pytest

from netstorm.geoserver.model import checkpoint
from netstorm.geoserver.worker.client import KeyInfo, KVStoreError
from netstorm.kvstore.server_states import load_optimizer_states, save_checkpoint, \
    save_optimizer_states


class Servers:
    """A worker client whose keys hold ``values`` after ``rounds`` pushes each."""

    def __init__(self, values: dict, rounds):
        self.values, self.resume_base = values, 10
        self.keys = {k: KeyInfo(k, v.shape, v.dtype, pushes=r)
                     for (k, v), r in zip(values.items(), rounds)}

    def start_pull(self, kid):
        return kid

    def finish_into(self, kid, pending, out):
        out[:] = self.values[pending].ravel()


def test_a_checkpoint_holds_every_key_at_one_round(tmp_path):
    values = {0: np.arange(6, dtype=np.float32).reshape(2, 3), 1: np.ones(2, np.float16)}
    path = tmp_path / "ck.npz"
    assert save_checkpoint(Servers(values, (3, 3)), str(path), None, None, {1}) == 13
    back = checkpoint.read(str(path))
    assert back.round == 13 and back.sparse == frozenset({1})
    assert all(np.array_equal(back.values[k], v) for k, v in values.items())
    with pytest.raises(KVStoreError, match=r"keys are at different rounds \(2\.\.3\)"):
        save_checkpoint(Servers(values, (2, 3)), str(path), None, None, set())


def test_optimizer_states_need_an_optimizer(tmp_path):
    client = SimpleNamespace()
    with pytest.raises(KVStoreError, match="save_optimizer_states: no optimizer set"):
        save_optimizer_states(client, None, str(tmp_path / "s"), False)
    with pytest.raises(KVStoreError, match="load_optimizer_states: no optimizer set"):
        load_optimizer_states(client, None, str(tmp_path / "s"))
