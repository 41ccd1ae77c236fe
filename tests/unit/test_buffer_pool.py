"""BufferPool: an array comes back only once nothing but the pool refers to it."""

import numpy as np
from netstorm.geoserver.server.buffer_pool import BufferPool


def test_an_array_is_reused_only_when_nothing_else_refers_to_it():
    pool = BufferPool(per_shape=1)
    a = pool.take(1000, np.float32)
    b = pool.take(1000, np.float32)
    assert b is not a and pool.made == 2                # `a` is still held here
    view = a[10:20]
    del a, b
    assert not np.shares_memory(pool.take(1000, np.float32), view)  # a view keeps it
    assert pool.reused == 0
    del view
    c = pool.take(1000, np.float32)
    assert pool.reused == 1 and c.shape == (1000,) and c.dtype == np.float32
    assert pool.take(1000, np.float64).dtype == np.float64   # another shape: another list
    assert pool.take(999, np.float32).shape == (999,)


def test_at_most_per_shape_arrays_are_kept():
    pool = BufferPool(per_shape=2)
    held = [pool.take(10, np.float32) for _ in range(5)]
    assert pool.made == 5
    del held
    for _ in range(3):
        pool.take(10, np.float32)
    assert pool.reused == 3 and pool.made == 5      # the two kept, again and again


def test_add_and_copy_write_into_the_pool():
    pool = BufferPool()
    x, y = np.arange(8, dtype=np.float32), np.ones(8, dtype=np.float32)
    s = pool.add(x, y)
    assert np.array_equal(s, x + 1) and s is not x and s is not y
    del s
    c = pool.copy(x)
    assert pool.reused == 1 and np.array_equal(c, x)


def test_no_more_than_max_bytes_are_kept():
    pool = BufferPool(per_shape=100, max_bytes=3 * 400)
    held = [pool.take(100, np.float32) for _ in range(5)]      # 400 bytes each
    assert pool.kept_bytes == 1200
    del held
    assert [pool.take(100, np.float32) is not None for _ in range(3)] and pool.reused == 3
