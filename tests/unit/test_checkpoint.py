"""geoserver/model/checkpoint.py: written atomically, read back exactly, refused when tampered."""
import json

import numpy as np
import pytest

from netstorm.geoserver.model import checkpoint
from netstorm.geoserver.model.checkpoint import Checkpoint, CheckpointError


def sample() -> Checkpoint:
    return Checkpoint(7, {0: np.arange(6, dtype=np.float32).reshape(2, 3),
                          5: np.ones(4, np.float16)}, frozenset({5}),
                      {"name": "sgd", "attrs": {"momentum": 0.5}}, {"states": [], "counts": [],
                                                                    "num_update": 3},
                      [b"\x01\x02\x03"])


def test_a_checkpoint_reads_back_exactly_and_leaves_no_partial_file(tmp_path):
    path = tmp_path / "c.npz"
    checkpoint.write(path, sample())
    got = checkpoint.read(path)
    assert (got.round, got.sparse, got.optimizer, got.states_meta) == \
        (7, frozenset({5}), {"name": "sgd", "attrs": {"momentum": 0.5}},
         {"states": [], "counts": [], "num_update": 3})
    assert np.array_equal(got.values[0], sample().values[0]) and got.values[5].dtype == np.float16
    assert [bytes(f) for f in got.state_frames] == [b"\x01\x02\x03"]
    assert [p.name for p in tmp_path.iterdir()] == ["c.npz"]
    assert checkpoint.read_header(path)["round"] == 7


def test_an_array_that_does_not_match_its_checksum_is_refused(tmp_path):
    path = tmp_path / "c.npz"
    checkpoint.write(path, sample())
    with np.load(path) as data:
        arrays = {name: data[name] for name in data.files}
    arrays["value_0"] = arrays["value_0"] + 1           # a consistent zip, wrong values
    np.savez(path, **arrays)
    with pytest.raises(CheckpointError, match="array 'value_0' does not match its checksum"):
        checkpoint.read(path)


@pytest.mark.parametrize("content, message", [
    (b"not a zip", "not a netstorm checkpoint"),
    ({"format": "other"}, "not a netstorm checkpoint"),
    ({"format": "netstorm-checkpoint", "version": 99}, "checkpoint version 99"),
])
def test_other_files_are_refused_naming_them(tmp_path, content, message):
    path = tmp_path / "x.npz"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        np.savez(path, header=np.frombuffer(json.dumps(content).encode(), np.uint8))
    with pytest.raises(CheckpointError, match=message):
        checkpoint.read(path)
    assert str(path) in str(pytest.raises(CheckpointError, checkpoint.read, path).value)


def test_initial_values_and_optimizer_rules():
    ckpt = sample()
    assert checkpoint.initial_value(None, 0, (2, 3), np.float32) is None
    assert checkpoint.initial_value(ckpt, 9, (2, 3), np.float32) is None
    assert np.array_equal(checkpoint.initial_value(ckpt, 0, (2, 3), "<f4"), np.arange(6))
    with pytest.raises(CheckpointError, match=r"key 0 was saved as \(2, 3\) float32, the "
                                              r"script declares \(3, 2\) float32"):
        checkpoint.initial_value(ckpt, 0, (3, 2), np.float32)
    assert checkpoint.optimizer_problem(ckpt, {"name": "sgd", "attrs": {"lr": 0.01}}) == ""
    assert "holds the states of optimizer 'sgd'; the script sets 'adam'" in \
        checkpoint.optimizer_problem(ckpt, {"name": "adam"})
    assert checkpoint.optimizer_problem(Checkpoint(1, {}), {"name": "adam"}) == ""
