"""netstorm.bench.train_args: train mode's flags, their defaults per workload, and how they
become the workers' command lines and the clusters' [sync] and [compression] tables."""
import pytest

from netstorm.bench import worker
from netstorm.bench.cli import parse_args
from netstorm.bench.systems import COMPRESSED, SYNCED, SYSTEMS
from netstorm.bench.train_args import (compression_params, eval_every_of, hyper_parameters,
                                       iters_of, steps_per_wan_round,
                                       mixed_worker_args, parse_iters_for, sync_settings,
                                       worker_args)
from netstorm.geoserver.config.compression import CompressionConfig
from netstorm.geoserver.config.sync import SyncConfig


def train(*argv):
    return parse_args(["--mode", "train", *argv])


def test_each_workload_fills_in_its_own_defaults():
    mlp = train()
    assert (mlp.workload, mlp.model, mlp.data, mlp.hidden, mlp.optimizer, mlp.lr,
            mlp.batch_size, mlp.eval_every, mlp.iters) == \
        ("mlp-digits", "mlp-digits", "digits", 1024, "sgd", 0.01, 32, 5, 200)
    lm = train("--workload", "lm", "--systems", "mxnet-1ps")
    assert (lm.data, lm.hidden, lm.optimizer, lm.lr, lm.batch_size, lm.eval_every,
            lm.iters, lm.vocab, lm.seq_len, lm.layers, lm.heads) == \
        ("python-docs", 128, "adam", 0.001, 8, 50, 1000, 8192, 32, 2, 4)
    given = train("--workload", "cnn-digits", "--inner-optimizer", "adam", "--lr", "0.002",
                  "--hidden", "64", "--iters", "7")
    assert (given.optimizer, given.lr, given.hidden, given.iters) == ("adam", 0.002, 64, 7)
    assert train("--model", "mlp").workload == "mlp-digits"    # the old spelling


def test_iters_for_overrides_iters_per_system():
    args = train("--systems", "mxnet-1ps,netstorm-fapt", "--iters", "30",
                 "--iters-for", " netstorm-fapt=300 ")
    assert args.iters_for == {"netstorm-fapt": 300}
    assert (iters_of(args, "netstorm-fapt"), iters_of(args, "mxnet-1ps")) == (300, 30)
    assert parse_iters_for("", ["a"]) == {} and parse_iters_for(None, ["a"]) == {}
    assert parse_iters_for("a=1,b=20", ["a", "b"]) == {"a": 1, "b": 20}
    for text, message in (("a=x", "SYSTEM=N"), ("a=-1", "SYSTEM=N"), ("c=2", "'c', which is "
                                                                       "not in --systems")):
        with pytest.raises(ValueError, match="--iters-for") as exc:
            parse_iters_for(text, ["a", "b"])
        assert message in str(exc.value)


def test_the_worker_reads_back_every_hyper_parameter_it_is_given():
    args = train("--workload", "lm", "--systems", "mxnet-1ps,netstorm-fapt", "--hidden", "64",
                 "--heads", "2", "--vocab", "1000", "--seq-len", "16", "--wd", "0.01",
                 "--iters-for", "netstorm-fapt=99", "--seed", "3", "--eval-tokens", "512")
    argv = worker_args(args, iters=iters_of(args, "netstorm-fapt"))
    got = worker.parse_args(["--kvstore", "netstorm", "--out", "x", *argv])
    assert got.iters == 99 and got.mode == "train"
    for name, value in hyper_parameters(args).items():
        if name != "iters":
            assert getattr(got, name) == value, name
    assert hyper_parameters(args)["eval_tokens"] == 512 and "momentum" not in \
        hyper_parameters(args)
    assert hyper_parameters(train())["momentum"] == 0.9 and "vocab" not in \
        hyper_parameters(train())


def test_mixed_uses_dcasgd_with_sgd_only():
    flags = mixed_worker_args(train())
    assert flags[:2] == ["--optimizer", "dcasgd"] and flags[4:] == ["--momentum", "0"]
    assert float(flags[3]) == pytest.approx(0.01 / (1 - 0.9))
    assert mixed_worker_args(train("--optimizer", "adam")) == []


def test_the_new_systems_name_their_sync_and_compression_settings():
    for name in ("netstorm-diloco", "netstorm-diloco-fp16", "netstorm-diloco-int8",
                 "netstorm-diloco-topk2bit", "netstorm-streaming"):
        assert name in SYSTEMS
    assert {n: SYNCED[n] for n in SYNCED if "diloco" in n or "streaming" in n} == {
        "netstorm-diloco": "diloco", "netstorm-diloco-fp16": "diloco",
        "netstorm-diloco-int8": "diloco", "netstorm-diloco-topk2bit": "diloco",
        "netstorm-streaming": "streaming", "netstorm-diloco-torch": "diloco"}
    assert (COMPRESSED["netstorm-diloco-fp16"], COMPRESSED["netstorm-diloco-int8"],
            COMPRESSED["netstorm-diloco-topk2bit"], COMPRESSED["netstorm-streaming"]) == \
        ("fp16", "int8", "topk2bit", "streaming")
    assert "netstorm-diloco" not in COMPRESSED and COMPRESSED["mxnet-2bit"] == "2bit"
    assert (SYNCED["netstorm-hfa"], COMPRESSED["netstorm-bsc"]) == ("hfa", "bsc")


def test_compression_params_follow_the_flags():
    params = compression_params(train("--topk-ratio", "0.02", "--topk-warmup-rounds", "3"))
    assert params["int8"] == {"type": "int8"} and params["streaming"] == {"type": "int8"}
    assert params["topk2bit"] == {"type": "topk2bit", "ratio": 0.02, "warmup_rounds": 3}
    assert compression_params(train("--streaming-compression", "none"))["streaming"] is None
    assert compression_params(train("--streaming-compression", "fp16"))["streaming"] == \
        {"type": "fp16"}


def test_sync_settings_build_only_what_the_systems_run():
    args = train("--systems", "netstorm-hfa,netstorm-fapt", "--k1", "3")
    assert sync_settings(args) == {"hfa": SyncConfig(mode="hfa", k1=3, k2=2)}
    assert sync_settings(args, ["netstorm-esync", "netstorm-mixed"]) == {
        "esync": SyncConfig(mode="esync", max_steps=8),
        "mixed": SyncConfig(mode="mixed", staleness=2)}


def test_diloco_flags_become_the_sync_config():
    args = train("--systems", "netstorm-diloco,netstorm-streaming", "--h", "20",
                 "--outer-lr", "0.5", "--outer-momentum", "0.8", "--fragments", "3",
                 "--delay", "2", "--mix", "0.25")
    settings = sync_settings(args)
    plain, streaming = settings["diloco"], settings["streaming"]
    assert (plain.mode, plain.h, plain.outer_lr, plain.outer_momentum, plain.fragments) == \
        ("diloco", 20, 0.5, 0.8, 1)
    assert (streaming.mode, streaming.h, streaming.fragments, streaming.delay,
            streaming.mix) == ("diloco", 20, 3, 2, 0.25)
    assert SyncConfig.parse(streaming.describe()) == streaming
    assert (plain.delay, plain.streaming, streaming.streaming) == (0, False, True)
    defaults = sync_settings(train("--systems", "netstorm-streaming"))["streaming"]
    assert (defaults.h, defaults.outer_lr, defaults.outer_momentum, defaults.fragments,
            defaults.delay, defaults.mix) == (50, 0.7, 0.9, 4, 5, 0.5)


def test_the_new_compression_types_are_accepted():
    params = compression_params(train())
    for kind in ("int8", "topk2bit", "streaming"):
        config = CompressionConfig.from_params(params[kind]).to_params()
        assert config == {**params[kind], "scope": "wan"}      # between DC servers


def test_settings_the_sync_config_refuses_name_the_flags(capsys):
    with pytest.raises(SystemExit):
        train("--systems", "netstorm-streaming", "--h", "4", "--delay", "4")
    err = capsys.readouterr().err
    assert "--h/--outer-lr/--outer-momentum/--fragments/--delay/--mix" in err
    assert "delay (4) must be less than h (4)" in err
    with pytest.raises(SystemExit):
        train("--systems", "netstorm-diloco-topk2bit", "--topk-ratio", "2")
    assert "--topk2bit settings: ratio must be in (0, 1]" in capsys.readouterr().err


def test_evaluations_between_outer_rounds_are_warned_about(capsys):
    train("--systems", "netstorm-diloco,netstorm-fapt", "--eval-every", "30", "--h", "20")
    assert "netstorm-diloco evaluate every 60 iterations (--eval-every 30 rounded up" in \
        capsys.readouterr().err
    train("--systems", "netstorm-diloco", "--eval-every", "40", "--h", "20")
    train("--systems", "netstorm-fapt", "--eval-every", "3")
    assert capsys.readouterr().err == ""


def test_diloco_systems_evaluate_the_global_model_at_a_multiple_of_h():
    args = parse_args(["--mode", "train", "--workload", "mlp-digits", "--eval-every", "5",
                       "--h", "20", "--systems", "netstorm-fapt,netstorm-diloco,"
                       "netstorm-streaming,netstorm-hfa"])
    assert [eval_every_of(args, s) for s in args.systems] == [5, 20, 20, 5]
    line = worker_args(args, iters=40, eval_every=eval_every_of(args, "netstorm-diloco"))
    assert line[line.index("--eval-every") + 1] == "20"
    assert eval_every_of(parse_args(["--h", "20"]), "netstorm-diloco") is None   # comm mode


def test_the_local_update_systems_synchronize_across_the_wan_every_h_or_k1_k2_steps():
    args = parse_args(["--mode", "train", "--h", "25", "--k1", "4", "--k2", "2", "--systems",
                       "netstorm-diloco,netstorm-streaming,netstorm-hfa,netstorm-fapt"])
    assert [steps_per_wan_round(args, s) for s in args.systems] == [25, 25, 8, None]
