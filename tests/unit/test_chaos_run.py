"""netstorm.bench.chaos_run and chaos_report, without running anything: the --chaos flags'
refusals, the recovery options a cluster file takes, what the step watcher reads from the
cluster's output, and the report's table."""
import dataclasses
import io

import pytest
from netstorm.bench import chaos_report
from netstorm.bench.chaos_run import StepWatcher, with_recovery
from netstorm.bench.cli import parse_args
from netstorm.geoserver.config.cluster import ClusterConfig, DataCenter
from netstorm.geoserver.config.compression import CompressionConfig
from netstorm.geoserver.config.sync import SyncConfig

TRAIN = ["--mode", "train", "--systems", "netstorm-fapt"]


@pytest.mark.parametrize("argv, message", [
    (["--chaos", "worker"], "--chaos measures training under faults: add --mode train"),
    (["--mode", "train", "--systems", "netstorm-fapt,netstorm-hips", "--chaos", "worker"],
     "--chaos runs one system"),
    (["--mode", "train", "--systems", "mxnet-1ps", "--chaos", "worker"],
     "--chaos runs one system"),
    ([*TRAIN, "--chaos", "disk"], "--chaos: unknown fault kind 'disk'"),
    ([*TRAIN, "--chaos", "worker", "--every", "0"], "--every: '0' is not a length of time"),
    ([*TRAIN, "--chaos", "worker", "--duration", "long"], "--duration: 'long'"),
    ([*TRAIN, "--chaos", "worker", "--checkpoint-every", "-1"],
     "--checkpoint-every must be >= 0"),
    ([*TRAIN, "--chaos", "worker", "--chaos-timeout", "1"], "--chaos-timeout must be >= 5"),
    ([*TRAIN, "--chaos", "link-cut", "--chaos-loopback"], "link-cut was the only fault kind"),
    (["--mode", "train", "--systems", "netstorm-esync", "--chaos", "worker"],
     "--chaos runs one system"),
    (["--mode", "train", "--systems", "netstorm-diloco", "--h", "5", "--iters", "12",
      "--chaos", "worker"], "--iters 12 must be a multiple of the 5 steps"),
])
def test_chaos_flags_that_cannot_work_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err and "Traceback" not in err


def test_chaos_flags_are_resolved(capsys):
    args = parse_args([*TRAIN, "--chaos", "all", "--every", "1m", "--duration", "15m",
                       "--chaos-loopback"])
    assert [k.name for k in args.chaos] == ["server", "dc-stop", "worker", "scheduler"]
    assert (args.every, args.duration) == (60.0, 900.0)
    assert "link-cut left out" in capsys.readouterr().err
    assert parse_args(TRAIN).chaos is None


def _config(**fields):
    return ClusterConfig("127.0.0.1", 9000, (DataCenter("a", "127.0.0.1", 0, 1),
                                            DataCenter("b", "127.0.0.1", 0, 1)), **fields)


def test_recovery_options_on_where_the_cluster_file_takes_them(tmp_path):
    config, refused = with_recovery(_config(), 3, tmp_path / "c.npz")
    assert (config.worker_restarts, config.server_restarts, config.cluster_restarts) == \
        (3, 3, 3)
    assert (config.min_dcs, config.rejoins) == (2, 3)       # a majority of the 2 DCs
    assert config.checkpoint == str(tmp_path / "c.npz")
    has_scheduler_restarts = "scheduler_restarts" in {
        f.name for f in dataclasses.fields(ClusterConfig)}
    assert ("scheduler_restarts" in refused) != has_scheduler_restarts
    assert set(refused) <= {"scheduler_restarts"}


def test_refused_recovery_options_are_named_with_why(tmp_path):
    compressed = _config(compression=CompressionConfig.from_params({"type": "fp16"}))
    config, refused = with_recovery(compressed, 2, tmp_path / "c.npz")
    assert config.server_restarts == 2 and config.worker_restarts == 2
    assert set(refused) == {"elastic"} and "[compression]" in refused["elastic"]
    mixed = _config(sync=SyncConfig.from_params({"mode": "mixed"}, where="test"))
    config, refused = with_recovery(mixed, 2, tmp_path / "c.npz")
    assert config.server_restarts == 0 and "mixed" in refused["server_restarts"]
    diloco = _config(sync=SyncConfig.from_params({"mode": "diloco", "h": 5}, where="test"))
    config, refused = with_recovery(diloco, 2, tmp_path / "c.npz")
    assert "worker_restarts" not in refused and config.worker_restarts == 2   # localrestart
    for option in ("server_restarts", "cluster_restarts"):
        if option in refused:           # until recovery under diloco is in (issue 39)
            assert "diloco" in refused[option] or "fsa" in refused[option]
        else:
            assert getattr(config, option) == 2


def test_the_step_watcher_reads_rank_0s_steps_and_evaluations():
    log, seen = io.StringIO(), []
    watcher = StepWatcher(log, "sys", on_first_step=lambda: seen.append(1))
    watcher.write("[worker dc0/0] step 1 t=100.500\n[worker dc0/0] step 2 t=101.000\n")
    watcher.write("[worker dc0/0] iter 2/10 0.050s validation loss 4.1234 (perplexity 61.8) "
                  "at 1.0s\n[worker dc1/0] something else\n")
    watcher.write("[worker dc0/0] iter 4/10 0.050s test accuracy 0.9125 at 2.0s\n")
    assert watcher.steps == [(1, 100.5), (2, 101.0)] and seen == [1]
    assert [(s, v) for _, s, v in watcher.evals] == [(2, 4.1234), (4, 0.9125)]
    assert "something else" in log.getvalue()


def _result(**chaos):
    free = {"exit_code": 0, "useful_samples": 1000, "wall_s": 10.0, "goodput": 100.0,
            "final_quality": 4.0, "metric": "loss", "weights_sha256": "x",
            "lost_or_doubled": {"audit_mismatches": None, "audit_records": 0,
                                "replicas_differing": 0, "steps_missing": 0, "total": 0},
            "recovery_refused": {}}
    return {"system": "netstorm-diloco", "topology": "small", "workers_per_dc": 1,
            "sync": "diloco", "every_s": 60.0, "duration_s": 900.0, "seed": 1,
            "fault_free": free, "chaos": {**free, **chaos}, "goodput_ratio": 0.9,
            "by_kind": {"server": {"count": 3, "next_round_median_s": 2.0,
                                   "next_round_max_s": 3.5, "steady_median_s": 4.0,
                                   "steady_max_s": None, "never_steady": 1}},
            "skipped": [{"kind": "worker", "target": "dc1/0", "at_s": 60.0, "why": "gone"}]}


def test_the_table_says_every_figure():
    text = chaos_report.table(_result(goodput=90.0, final_quality=4.04, weights_sha256="y",
                                      recovery_refused={"scheduler_restarts": "no field"}))
    assert "server         3" in text and "2.0s / 3.5s" in text and "4.0s / -" in text
    assert "goodput: 90.00 samples/s against 100.00 fault-free (90.0%)" in text
    assert "lost or doubled updates: 0 (no audit records" in text
    assert "final loss: 4.0400 against 4.0000 fault-free (+1.00%); final weights differ" \
        in text
    assert "skipped: worker dc1/0 at 60s: gone" in text
    assert "recovery option scheduler_restarts not on: no field" in text


def test_the_table_says_a_failed_run():
    text = chaos_report.table(_result(exit_code=3))
    assert "the chaos run FAILED (exit 3)" in text and "bit-identical" in text


def test_the_plot_draws_both_curves_and_the_faults(tmp_path):
    pytest.importorskip("matplotlib")
    result = _result(first_step_t=1000.0)
    result["curves"] = {"fault_free": [[1.0, 10, 4.5], [2.0, 20, 4.2]],
                        "chaos": [[1.5, 10, 4.5], [3.0, 20, 4.25]]}
    result["faults"] = [{"kind": "dc-stop", "t": 1001.0, "length_s": 0.5},
                        {"kind": "server", "t": 1002.0, "length_s": 0.0}]
    path = chaos_report.plot(result, str(tmp_path / "chaos.png"))
    assert (tmp_path / "chaos.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and \
        path.endswith("chaos.png")
