import pytest

from netstorm.geoserver.policy.chunking import chunk_ranges


@pytest.mark.parametrize("size,itemsize,chunk", [(10, 4, 8), (1000, 4, 1024), (1, 2, 1024),
                                                  (4097, 4, 4096), (12, 8, 3)])
def test_chunks_cover_exactly_and_respect_size(size, itemsize, chunk):
    ranges = chunk_ranges(size, itemsize, chunk)
    assert ranges[0][0] == 0 and ranges[-1][1] == size
    assert all(a == b for (_, a), (b, _) in zip(ranges, ranges[1:]))
    per = max(1, chunk // itemsize)
    assert all(0 < stop - start <= per for start, stop in ranges)


def test_empty_tensor_is_one_empty_chunk():
    assert chunk_ranges(0, 4, 1024) == [(0, 0)]


def test_bad_arguments_raise():
    with pytest.raises(ValueError):
        chunk_ranges(10, 0, 1024)
