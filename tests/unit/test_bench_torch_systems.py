"""netstorm.bench.torch_systems, torch_models and torch_worker's pure parts: the PyTorch
systems' rows, their commands and DC order, their refusals; the ResNet-18 twin's size; the
expected synchronized values."""
from pathlib import Path
from types import SimpleNamespace

import pytest

from netstorm.bench import cli, systems, torch_systems
from netstorm.bench.torch_models import build
from netstorm.bench.torch_worker import expected, parse_args


def test_the_rows_are_in_the_benchs_systems():
    assert set(torch_systems.TORCH_SYSTEMS) == {
        "torch-ddp", "torch-ddp-fp16", "torch-post-local-sgd", "netstorm-fapt-torch",
        "netstorm-diloco-torch"}
    assert set(torch_systems.TORCH_SYSTEMS) <= set(systems.SYSTEMS)
    assert "netstorm-fapt-torch" in systems.FAPT_TREES
    assert systems.SYNCED["netstorm-diloco-torch"] == "diloco"


def test_the_resnet18_twin_moves_gluons_resnet18_v1_bytes():
    params = list(build("resnet18_v1").parameters())
    assert len(params) == 62 and sum(p.numel() for p in params) == 11_689_512
    with pytest.raises(ValueError, match="resnet18_v1 only, not --model vgg16"):
        build("vgg16")


def test_expected_values_are_the_sum_or_the_dcs_average():
    assert expected(0, 4, 3) == 4 * 5 / 2 * 3
    assert expected(0, 4, 2, dc_ranks=[0, 1]) == (1 * 2 * 4 + 2 * 2 * 4) / 2


def fake_ctx(tmp_path):
    wan = SimpleNamespace(dc_address=lambda dc: f"10.0.0.{dc[-1]}",
                          exec_prefix=lambda dc: ["ip", "netns", "exec", dc])
    return SimpleNamespace(wan=wan, topology=SimpleNamespace(dcs=["dc0", "dc1", "dc2"]),
                           best_dc="dc1", workers_per_dc=2, log=None, local_steps=20,
                           worker_args=["--model", "resnet18_v1", "--mode", "comm",
                                        "--iters", "3"], out_dir=tmp_path)


def test_ddp_ranks_start_in_the_best_connected_dc_with_gloo_on_the_dcs_address(
        monkeypatch, tmp_path):
    started = []

    class Launcher:
        def __init__(self, out):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def start(self, name, role, argv, env, wrap):
            started.append((name, env["RANK"], env["NETSTORM_BENCH_ADDRESS"], argv, wrap))

        def wait(self, total):
            return 0 if total == 6 else 1

    monkeypatch.setattr(torch_systems, "Launcher", Launcher)
    monkeypatch.setattr(torch_systems, "free_port", lambda: 1234)
    assert torch_systems.run_torch_ddp(fake_ctx(tmp_path), Path(tmp_path),
                                       "post-local-sgd") == 0
    assert [(n, r, a) for n, r, a, *_ in started] == [
        ("worker dc1/0", "0", "10.0.0.1"), ("worker dc1/1", "1", "10.0.0.1"),
        ("worker dc0/0", "2", "10.0.0.0"), ("worker dc0/1", "3", "10.0.0.0"),
        ("worker dc2/0", "4", "10.0.0.2"), ("worker dc2/1", "5", "10.0.0.2")]
    argv = started[0][3]
    assert argv[argv.index("--dc-ranks") + 1] == "0,1:2,3:4,5"
    assert argv[argv.index("--backend") + 1] == "post-local-sgd"
    assert argv[argv.index("--period") + 1] == "20"        # the bench's --h in train mode
    assert parse_args(argv[argv.index("--backend"):]).iters == 3
    assert started[2][4] == ["ip", "netns", "exec", "dc0"]


def test_without_pytorch_they_are_refused_naming_the_extra(monkeypatch, capsys):
    assert torch_systems.refused(["netstorm-fapt", "torch-ddp"]) == ""
    monkeypatch.setattr(torch_systems.importlib.util, "find_spec", lambda name: None)
    assert "pip install 'netstorm[torch]'" in torch_systems.refused(["torch-ddp"])
    assert torch_systems.refused(["netstorm-fapt"]) == ""
    with pytest.raises(SystemExit) as exc:
        cli.parse_args(["--systems", "netstorm-fapt,torch-ddp-fp16"])
    assert exc.value.code == 2
    assert "torch-ddp-fp16 need PyTorch" in capsys.readouterr().err


def test_the_worker_takes_the_train_flags_the_bench_gives_every_worker():
    from netstorm.bench.train_args import worker_args
    bench = cli.parse_args(["--mode", "train", "--systems", "torch-ddp,netstorm-fapt",
                            "--workload", "lm"])
    args = parse_args(["--backend", "ddp", "--out", "x", *worker_args(bench)])
    assert (args.workload, args.optimizer, args.batch_size, args.hidden, args.seq_len) == \
        ("lm", "adam", bench.batch_size, bench.hidden, bench.seq_len)
