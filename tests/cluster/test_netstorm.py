"""netstorm: the tests that start processes or open sockets; the rest, and the helpers
both use, are in tests/unit/test_netstorm.py."""

import json
import re
import subprocess
import sys
import mxnet as mx
import numpy as np
import pytest
from launching import free_port, launch, worker_cmd
from netstorm.geoserver.worker.client import KVStoreError
from unit.test_netstorm import store  # noqa: F401  (fixtures)


@pytest.mark.slow
def test_every_method_has_dist_sync_semantics(no_leftovers):
    # small chunks so the large key travels as ~260 chunks; 2 DCs x 2 workers
    run = launch(["--dcs", 2, "--workers-per-dc", 2, "--chunk-bytes", 4096],
                 worker_cmd("api_worker.py"), no_leftovers)
    assert run.code == 0, run.output[-5000:]
    for rank in range(4):
        assert f"worker {rank} all checks passed" in run.output
    assert "FAILED" not in run.output


def _trainer_reference(num_workers, steps):
    import mxnet as mx
    from mxnet import autograd, gluon

    from workers import trainer_worker as tw
    net = tw.build_net([mx.cpu(0)])
    for p in net.collect_params().values():
        p.grad_req = "add"
    trainer = gluon.Trainer(net.collect_params(), "sgd", tw.optimizer_params(), kvstore=None)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    for step in range(steps):
        net.collect_params().zero_grad()
        for rank in range(num_workers):          # dist_sync sums every worker's gradient
            x, y = tw.batches(rank, step)
            with autograd.record():
                loss = loss_fn(net(mx.nd.array(x)), mx.nd.array(y))
            loss.backward()
        trainer.step(tw.BATCH)
    return {k: v.data().asnumpy() for k, v in net._collect_params_with_prefix().items()}


def _load(path):
    import mxnet as mx

    from workers import trainer_worker as tw
    net = tw.build_net([mx.cpu(0)])
    net.load_parameters(str(path))
    return {k: v.data().asnumpy() for k, v in net._collect_params_with_prefix().items()}


@pytest.mark.slow
@pytest.mark.parametrize("update_on_kvstore,devices", [("true", 1), ("false", 2)])
def test_trainer_matches_single_process_reference(no_leftovers, update_on_kvstore, devices):
    steps = 6
    run = launch(["--dcs", 2, "--workers-per-dc", 2],
                 worker_cmd("trainer_worker.py", no_leftovers, "--update-on-kvstore",
                            update_on_kvstore, "--devices", devices, "--steps", steps,
                            "--check-states"), no_leftovers)
    assert run.code == 0, run.output[-5000:]
    assert run.output.count("states check ok") == 4
    reference = _trainer_reference(4, steps)
    results = [_load(no_leftovers / f"rank{r}.params") for r in range(4)]
    for name, want in reference.items():
        for r, got in enumerate(results):
            np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6,
                                       err_msg=f"rank {r} {name}")
            # every worker holds bit-identical weights: same summed bytes everywhere
            assert np.array_equal(got[name], results[0][name]), (r, name)
        assert not np.allclose(want, _trainer_reference(4, 0)[name]), "weights never moved"


@pytest.mark.slow
def test_module_matches_single_process_reference(no_leftovers):
    from workers import module_worker as mw
    steps, workers = 5, 3
    run = launch(["--dcs", 3, "--workers-per-dc", 1],
                 worker_cmd("module_worker.py", no_leftovers, "--steps", steps), no_leftovers)
    assert run.code == 0, run.output[-5000:]
    mod = mw.make_module(mw.BATCH * workers, None)
    for s in range(steps):
        xs, ys = zip(*[mw.batches(r, s) for r in range(workers)])
        mw.step(mod, np.concatenate(xs), np.concatenate(ys))
    reference = {k: v.asnumpy() for k, v in mod.get_params()[0].items()}
    for r in range(workers):
        got = np.load(no_leftovers / f"rank{r}.npz")
        for name, want in reference.items():
            np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6,
                                       err_msg=f"rank {r} {name}")
            assert not np.allclose(want, mw.initial_params()[name].asnumpy())


@pytest.mark.slow
def test_initial_values_pass_along_the_tree_to_far_dcs(no_leftovers):
    """Rank 0's initial values spread over the first tree's links: on a chain of 4 DCs each
    DC passes them on to the next, and every worker still sees exactly rank 0's values."""
    from netstorm.geoserver.config.cluster import Link, pseudo_cluster
    from netstorm.geoserver.config.cluster_toml import to_toml
    chain = tuple(Link(f"dc{i}", f"dc{i + 1}", 100.0, 100.0) for i in range(3))
    cluster = no_leftovers / "chain.toml"
    cluster.write_text(to_toml(pseudo_cluster(4, 1, free_port(), policy="fapt", links=chain)))
    run = launch(["--cluster", cluster], worker_cmd("api_worker.py"), no_leftovers)
    assert run.code == 0, run.output[-5000:]
    for rank in range(4):
        assert f"worker {rank} all checks passed" in run.output
    assert "FAILED" not in run.output and "cannot pass on INIT" not in run.output




@pytest.mark.slow
@pytest.mark.parametrize("scope", ["wan", "all"])
def test_fp16_compression_along_multi_root_trees_keeps_every_check(no_leftovers, scope):
    """The cluster file's [compression] in force on a 4-DC chain with multi-root trees: the
    same API checks pass (fp16 carries these small integers exactly), the script's own
    setting is accepted and another one refused, and chunks really travel encoded (with
    scope "all", the workers' pushes too)."""
    from netstorm.geoserver.config.cluster import Link, pseudo_cluster
    from netstorm.geoserver.config.cluster_toml import to_toml
    chain = tuple(Link(f"dc{i}", f"dc{i + 1}", 100.0, 100.0) for i in range(3))
    cluster = no_leftovers / "fp16.toml"
    cluster.write_text(to_toml(pseudo_cluster(4, 1, free_port(), policy="fapt", links=chain))
                       + f'\n[compression]\ntype = "fp16"\nscope = "{scope}"\n')
    params = json.dumps({"type": "fp16", "scope": scope})
    run = launch(["--cluster", cluster], worker_cmd("api_worker.py", params), no_leftovers)
    assert run.code == 0, run.output[-5000:]
    for rank in range(4):
        assert f"worker {rank} all checks passed" in run.output
    assert "FAILED" not in run.output and "dropped CHUNK" not in run.output
    sent = re.findall(r"WAN chunks sent \{'chunks': (\d+), 'encoded': (\d+)", run.output)
    assert len(sent) == 4 and all(int(e) > 0 for _, e in sent), sent
    pushes = [int(n) for n in re.findall(r"compressed pushes (\d+)", run.output)]
    assert len(pushes) == 4 and (all(pushes) if scope == "all" else not any(pushes)), pushes


def test_server_side_profiling_is_refused_clearly_and_worker_profiling_works(tmp_path,
                                                                             monkeypatch):
    """MXNet's profile_process='server' drives MXNet's own servers through the last native
    kvstore's handle (none: a C++ "null handle" error); netstorm says why instead, once one
    of its stores exists or when there is no handle. Never sent to MXNet here: a handle left
    by another test's store may be freed."""
    import mxnet.profiler
    from mxnet.base import KVStoreHandle
    from netstorm.kvstore import NetStorm
    trace = str(tmp_path / "profile.json")
    calls = (lambda: mx.profiler.set_config(filename=trace, profile_process="server"),
             lambda: mx.profiler.set_state("run", "server"),
             lambda: mx.profiler.dump(profile_process="server"),
             lambda: mx.profiler.pause("server"))
    monkeypatch.setattr(mxnet.profiler, "profiler_kvstore_handle", KVStoreHandle())
    monkeypatch.setattr(NetStorm, "created", 0)
    for call in calls:                                          # no handle at all
        with pytest.raises(KVStoreError, match="netstorm's DC servers do not run MXNet"):
            call()
    monkeypatch.setattr(mxnet.profiler, "profiler_kvstore_handle", KVStoreHandle(1))
    monkeypatch.setattr(NetStorm, "created", 1)
    for call in calls:                                          # a netstorm store exists
        with pytest.raises(KVStoreError, match="netstorm's DC servers do not run MXNet"):
            call()
    worker = ("import mxnet as mx, netstorm\n"          # in its own process: the profiler
              f"mx.profiler.set_config(profile_all=True, filename={trace!r})\n"  # is global
              "mx.profiler.set_state('run')\n"
              "(mx.nd.ones((4, 4)) * 2).wait_to_read()\n"
              "mx.profiler.set_state('stop')\n"
              "mx.profiler.dump()\n")
    done = subprocess.run([sys.executable, "-c", worker], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "profile.json").stat().st_size > 0
