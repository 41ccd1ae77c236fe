"""The compression setting: MXNet's dict and the cluster file's table, checked once, with
errors naming the field and the accepted values."""
import pytest

from netstorm.geoserver.config.compression import CompressionConfig, CompressionError


def test_mxnet_s_own_dicts_are_accepted():
    assert CompressionConfig.from_params({"type": "2bit", "threshold": 1}).threshold == 1.0
    assert CompressionConfig.from_params({"type": "fp16"}).on
    bsc = CompressionConfig.from_params({"type": "bsc", "ratio": 0.001, "warmup_rounds": 5})
    assert (bsc.ratio, bsc.warmup_rounds) == (0.001, 5)
    assert not CompressionConfig.from_params(None).on
    dgc = CompressionConfig.from_params({"type": "mpq", "momentum": 0, "scope": "all"})
    assert dgc.momentum == 0.0 and isinstance(dgc.momentum, float) and dgc.scope == "all"
    assert CompressionConfig.from_params({"type": "int8", "scope": "all"}).scope == "all"
    topk = CompressionConfig.from_params({"type": "topk2bit", "ratio": 0.02,
                                          "warmup_rounds": 10})
    assert (topk.type, topk.ratio, topk.warmup_rounds) == ("topk2bit", 0.02, 10)


@pytest.mark.parametrize("params, match", [
    ({"type": "3bit"}, r"'3bit' is unknown; accepted: 'none', '2bit', 'fp16', 'bsc', 'mpq', "
                       r"'int8', 'topk2bit'$"),
    ({}, "None is unknown"),
    ("2bit", "must be a dict"),
    ({"type": "2bit", "threshold": -1}, "threshold must be a positive number"),
    ({"type": "2bit", "threshold": "0.5"}, "threshold must be a positive number"),
    ({"type": "2bit", "ratio": 0.1}, r"'2bit' takes no 'ratio' \(it takes 'threshold'"),
    ({"type": "fp16", "threshold": 0.5}, "'fp16' takes no 'threshold'"),
    ({"type": "bsc", "ratio": 0}, r"ratio must be in \(0, 1\]"),
    ({"type": "bsc", "ratio": 1.5}, r"ratio must be in \(0, 1\]"),
    ({"type": "bsc", "warmup_rounds": 2.5}, "warmup_rounds must be a whole number"),
    ({"type": "mpq", "size_threshold": -1}, "size_threshold must be a whole number"),
    ({"type": "fp16", "scope": "lan"}, "scope must be one of"),
    ({"type": "bsc", "momentum": 1}, r"momentum must be in \[0, 1\)"),
    ({"type": "bsc", "momentum": -0.1}, r"momentum must be in \[0, 1\)"),
    ({"type": "mpq", "momentum": True}, r"momentum must be in \[0, 1\)"),
    ({"type": "fp16", "momentum": 0.9}, "'fp16' takes no 'momentum'"),
    ({"type": "int8", "ratio": 0.1}, r"'int8' takes no 'ratio' \(it takes 'scope'\)"),
    ({"type": "int8", "threshold": 0.5}, "'int8' takes no 'threshold'"),
    ({"type": "topk2bit", "momentum": 0.9},
     "'topk2bit' takes no 'momentum': SparseLoCo's error feedback"),
    ({"type": "topk2bit", "momentum": 0}, "'topk2bit' takes no 'momentum': SparseLoCo's"),
    ({"type": "topk2bit", "size_threshold": 10},
     r"'topk2bit' takes no 'size_threshold' \(it takes 'ratio', 'warmup_rounds', 'scope'\)"),
    ({"type": "topk2bit", "ratio": 0}, r"ratio must be in \(0, 1\]"),
    ({"type": "topk2bit", "warmup_rounds": -1}, "warmup_rounds must be a whole number"),
])
def test_bad_params_are_refused_with_the_field_named(params, match):
    with pytest.raises(CompressionError, match=match):
        CompressionConfig.from_params(params)


def test_json_round_trip_and_params_round_trip():
    for config in (CompressionConfig("mpq", ratio=0.02, size_threshold=10),
                   CompressionConfig("topk2bit", ratio=0.03, warmup_rounds=2),
                   CompressionConfig("int8", scope="all")):
        assert CompressionConfig.from_json(config.to_json()) == config
        assert CompressionConfig.from_params(config.to_params()) == config
    with pytest.raises(CompressionError):
        CompressionConfig.from_json({"type": "bsc", "extra": 1})


@pytest.mark.parametrize("kind, match", [
    ("topk2bit", "'topk2bit' takes no 'momentum': SparseLoCo's error feedback"),
    ("fp16", r"'fp16' takes no 'momentum' \(it takes 'scope'\)"),
])
def test_momentum_is_refused_however_the_setting_comes(kind, match):
    """Not only from MXNet's dict: from the scheduler's JSON or made directly, a type that
    does not take momentum never runs with it (feedback.py would apply it to any type)."""
    with pytest.raises(CompressionError, match=match):
        CompressionConfig(kind, momentum=0.9)
    with pytest.raises(CompressionError, match=match):
        CompressionConfig.from_json({**CompressionConfig(kind).to_json(), "momentum": 0.9})
    assert CompressionConfig(kind, momentum=0.0).momentum == 0.0


def test_warm_up_starts_dense_and_decays_to_the_ratio():
    config = CompressionConfig("bsc", ratio=0.01, warmup_rounds=4)
    ratios = [config.ratio_at(r) for r in range(1, 7)]
    assert ratios[0] == 1.0 and ratios[4] == ratios[5] == 0.01
    assert all(a > b for a, b in zip(ratios, ratios[1:5]))
    assert CompressionConfig("bsc", ratio=0.01).ratio_at(1) == 0.01
