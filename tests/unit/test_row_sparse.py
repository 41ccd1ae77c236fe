"""kvstore.row_sparse: the rows asked for of a key's dense value, as row_sparse arrays."""
import mxnet as mx
import numpy as np
import pytest

from netstorm.kvstore.row_sparse import retained, row_sparse_pull

VALUE = mx.nd.array(np.arange(12).reshape(4, 3))


def pull(key, out):
    VALUE.copyto(out)


def declared(key, arrays, any_dtype=False):
    return 0


def test_the_rows_asked_for_any_order_and_repeated_arrive_row_sparse():
    outs = [mx.nd.sparse.zeros("row_sparse", (4, 3)) for _ in range(2)]
    row_sparse_pull(0, outs, [mx.nd.array([3, 1, 3])], declared, pull)
    for out in outs:
        assert out.stype == "row_sparse" and out.indices.asnumpy().tolist() == [1, 3]
        assert out.asnumpy()[[1, 3]].tolist() == VALUE.asnumpy()[[1, 3]].tolist()
        assert not out.asnumpy()[[0, 2]].any()
    assert retained(VALUE, mx.nd.array([]), 0).indices.size == 0


def test_bad_calls_are_refused_naming_the_key():
    out = mx.nd.sparse.zeros("row_sparse", (4, 3))
    with pytest.raises(ValueError, match="needs out= and row_ids="):
        row_sparse_pull(0, out, None, declared, pull)
    with pytest.raises(ValueError, match="key 0: out must be row_sparse"):
        row_sparse_pull(0, mx.nd.zeros((4, 3)), mx.nd.array([1]), declared, pull)
    with pytest.raises(ValueError, match="key 0: 1 outputs, 2 row_ids"):
        row_sparse_pull(0, out, [mx.nd.array([1]), mx.nd.array([2])], declared, pull)
    with pytest.raises(ValueError, match=r"key 0: row ids must be in 0\.\.3, got 1\.\.4"):
        row_sparse_pull(0, out, mx.nd.array([1, 4]), declared, pull)
