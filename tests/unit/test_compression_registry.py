"""The codec registry: every ``[compression] type`` the setting accepts has exactly one codec,
each round-trips a chunk (what it sends plus what it keeps is the chunk, exactly), and an
unknown name is refused naming ``[compression] type`` and the known names."""
import re

import numpy as np
import pytest

from netstorm.geoserver.compression import registry
from netstorm.geoserver.compression.feedback import DOWN, UP, ErrorFeedback
from netstorm.geoserver.compression.registry import CODECS, Codec, codec_class, codec_for
from netstorm.geoserver.config.cluster import ClusterFileError, parse_cluster
from netstorm.geoserver.config.compression import TYPES, CompressionConfig, CompressionError

KNOWN = "'none', '2bit', 'fp16', 'bsc', 'mpq', 'int8', 'topk2bit'"


def test_the_registry_and_the_setting_name_the_same_types():
    assert tuple(CODECS) == TYPES
    for name, cls in CODECS.items():
        assert issubclass(cls, Codec) and cls.name == name
        codec = codec_for(CompressionConfig(name))
        assert type(codec) is cls and codec.on == CompressionConfig(name).on


@pytest.mark.parametrize("name", list(CODECS))
@pytest.mark.parametrize("direction", [UP, DOWN])
@pytest.mark.parametrize("key_size", [1000, 100_000])     # mpq: fp16 below 65536, else bsc
def test_every_registered_codec_round_trips_a_chunk(name, direction, key_size):
    """Eighths in [-4, 4]: exact in half precision and against 2bit's threshold, so what
    is sent (decoded) plus the residual kept must equal the chunk bit for bit."""
    rng = np.random.default_rng(len(name) + key_size)
    x = (rng.integers(-32, 33, 1000) / 8).astype(np.float32)
    feedback = ErrorFeedback(CompressionConfig(name), seed=1)
    wire, encoded = feedback.encode(7, 0, x, 1, key_size, direction)
    assert encoded == (name != "none")
    sent = feedback.codec.decode(wire, len(x)) if encoded else wire
    kept = feedback.residual(7, key_size)[:len(x)]
    assert sent.dtype == np.float32 and np.array_equal(sent + kept, x)
    assert feedback.scheme(direction, key_size) in CODECS


def test_an_unknown_name_is_refused_naming_the_field_and_the_known_names():
    with pytest.raises(CompressionError, match=re.escape(
            f"[compression] type '3bit' has no codec; known: {KNOWN}") + "$"):
        codec_class("3bit")
    cluster = {"scheduler": {"host": "127.0.0.1", "port": 9000},
               "dc": [{"name": "a", "host": "127.0.0.1", "server_port": 0, "workers": 1}],
               "compression": {"type": "3bit"}}
    with pytest.raises(ClusterFileError, match=re.escape(
            f"c.toml [compression]: compression type '3bit' is unknown; accepted: {KNOWN}")
            + "$"):
        parse_cluster(cluster, source="c.toml")


def test_the_cluster_file_refuses_topk2bit_with_momentum_saying_why():
    cluster = {"scheduler": {"host": "127.0.0.1", "port": 9000},
               "dc": [{"name": "a", "host": "127.0.0.1", "server_port": 0, "workers": 1}],
               "compression": {"type": "topk2bit", "ratio": 0.02, "momentum": 0.9}}
    with pytest.raises(ClusterFileError, match=re.escape(
            "c.toml [compression]: compression type 'topk2bit' takes no 'momentum': "
            "SparseLoCo's error feedback")):
        parse_cluster(cluster, source="c.toml")
    cluster["compression"] = {"type": "topk2bit", "ratio": 0.02}
    assert parse_cluster(cluster, source="c.toml").compression.type == "topk2bit"


@pytest.mark.parametrize("name", ["int8", "topk2bit"])
def test_int8_and_topk2bit_encode_both_directions_themselves(name):
    """Unlike 2bit (half precision down) and mpq (by key size), one scheme everywhere:
    the root re-encodes the total with its own residual."""
    feedback = ErrorFeedback(CompressionConfig(name))
    assert {feedback.scheme(d, size) for d in (UP, DOWN) for size in (10, 10**6)} == {name}


def test_every_module_name_it_exports_exists():
    assert all(hasattr(registry, name) for name in registry.__all__)
