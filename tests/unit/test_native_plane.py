"""native_plane: which data path a server runs, and the compiled module's own checks (the
data-path tests themselves run on both paths through the ``dataplane`` fixture)."""
import numpy as np
import pytest

from netstorm.geoserver.config.compression import CompressionConfig
from netstorm.geoserver.config.settings import RuntimeSettings
from netstorm.geoserver.server import native_plane


def test_the_compiled_module_is_built_and_reaches_zeromq():
    """CI runs the native half of every data-path test: it must not run without it."""
    module, why = native_plane.core_module()
    assert module is not None, why


def test_auto_runs_native_where_it_applies_and_says_why_not_where_it_does_not():
    module, why = native_plane.choose(RuntimeSettings())
    assert module is not None and why == ""
    module, why = native_plane.choose(RuntimeSettings(dataplane="python"))
    assert module is None and "dataplane = \"python\"" in why
    compressed = RuntimeSettings(compression=CompressionConfig(type="fp16"))
    module, why = native_plane.choose(compressed)
    assert module is None and "compression is on" in why


def test_native_where_it_cannot_run_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(native_plane, "core_module", lambda: (None, "not built (test)"))
    with pytest.raises(RuntimeError, match=r'dataplane = "native" cannot run: not built'):
        native_plane.choose(RuntimeSettings(dataplane="native"))
    module, why = native_plane.choose(RuntimeSettings())
    assert module is None and why == "not built (test)"


@pytest.mark.parametrize("dtype,code", [(np.float32, 1), (np.float16, 2), (np.float64, 3),
                                        (np.int32, 4), (np.int64, 5), (np.uint8, 6),
                                        (np.int8, 7)])
def test_the_sums_are_numpys_bit_for_bit(dtype, code):
    """Replicas are bit-identical only if every DC's core adds exactly as numpy does:
    float16 through float32 with round-to-nearest-even, integers wrapping, odd lengths
    (the vector loop's tail) and special values included."""
    module, _ = native_plane.core_module()
    rng = np.random.default_rng(code)
    for n in (1, 7, 8, 1001):
        if np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            a = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
            b = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
        else:
            a = (rng.standard_normal(n) * 10.0 ** rng.integers(-8, 5, n)).astype(dtype)
            b = (rng.standard_normal(n) * 10.0 ** rng.integers(-8, 5, n)).astype(dtype)
            if n >= 8:
                a[:4] = [np.inf, -np.inf, 0.0, np.finfo(dtype).max]
                b[:4] = [1.0, 2.0, -0.0, np.finfo(dtype).max]
        with np.errstate(over="ignore"):
            want = a + b
        got = module.add_arrays(code, a, b)
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
