"""The keys a worker declares (geoserver/worker/keys.py)."""
import numpy as np
import pytest

from netstorm.geoserver.worker.keys import declare
from netstorm.geoserver.worker.settings import KVStoreError


def test_a_key_of_a_dtype_the_wire_cannot_carry_is_refused_when_declared():
    keys = {}
    with pytest.raises(KVStoreError, match="key 3: unsupported dtype"):
        declare(keys, 3, (2,), np.complex64)
