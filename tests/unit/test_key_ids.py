"""kvstore.key_ids: MXNet's key numbering (int keys are their ids, str keys numbered in init
order, the two kinds never sharing an id) and the checks of arrays against a declared key."""
from types import SimpleNamespace

import mxnet as mx
import numpy as np
import pytest

from netstorm.geoserver.worker.client import KeyInfo, KVStoreError
from netstorm.kvstore.key_ids import MAX_KEY, KeyIds, UninitializedKey


def test_str_keys_number_in_init_order_and_never_take_an_int_keys_id():
    keys = KeyIds(SimpleNamespace(keys={}))
    assert keys.id("w", create=True) == 0 and keys.id("b", create=True) == 1
    assert keys.id("w") == 0 and keys.id(np.int64(7)) == 7
    with pytest.raises(ValueError, match="int key 1 is the id of str key 'b'"):
        keys.id(1, create=True)
    keys.id(2, create=True)
    with pytest.raises(ValueError, match="str key 'c' would take id 2, which int key 2 has"):
        keys.id("c", create=True)
    for bad in (True, -1, MAX_KEY + 1, 1.0):
        with pytest.raises(ValueError, match="netstorm keys are str or int"):
            keys.id(bad)


def test_an_uninitialized_key_is_an_mxnet_error_and_arrays_must_match_the_key():
    client = SimpleNamespace(keys={0: KeyInfo(0, (3,), np.dtype(np.float32))})
    keys = KeyIds(client)
    with pytest.raises(UninitializedKey, match="key 'x' has not been initialized"):
        keys.id("x")
    assert issubclass(UninitializedKey, (KVStoreError, mx.base.MXNetError))
    with pytest.raises(UninitializedKey, match="key 5 has not been initialized"):
        keys.declared(5, [])
    assert keys.declared(0, [mx.nd.zeros(3)]) == 0
    assert keys.declared(0, [mx.nd.zeros(3, dtype="float16")], any_dtype=True) == 0
    with pytest.raises(ValueError, match=r"key 0 is \(3,\) float32; got an array of \(3,\) "
                                         r"float16"):
        keys.declared(0, [mx.nd.zeros(3, dtype="float16")])
