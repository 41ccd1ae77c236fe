"""Foreign peers against a live, secure cluster (issue 11, parts 2, 3 and 5): the attacks
that used to own a run, each sent while the workers train with exact sums, by a peer with no
key, with a stranger's key, and with a real DC's key speaking as another node. Every one is
refused where it arrives (and logged there), and the run ends normally with every sum exact.
"""
import time

import numpy as np
import pytest
import zmq

from live_cluster import Cluster
from netstorm.geoserver.core import wire
from netstorm.geoserver.config.keys import KeyPair, read_key_pair
from netstorm.geoserver.core.wire import Kind, Message

pytestmark = pytest.mark.slow

SHAPE = (64, 33)            # tests/workers/fuzz_worker.py's key 0
FINAL_ROUNDS = 10
SCHEDULER, SERVER_DC0, SERVER_DC1, WORKER_DC0 = 0, 1, 2, 3      # the cluster's node ids
# optimizer_spec(mx.optimizer.SGD(learning_rate=99.0)): a valid spec, so that only the role
# check can stop it (importing mxnet here would cost 5 s)
SGD_LR_99 = {"name": "sgd", "attrs": {"rescale_grad": 1.0, "lr": 99.0, "wd": 0.0,
                                      "begin_num_update": 0, "clip_gradient": None,
                                      "multi_precision": False, "aggregate_num": 4,
                                      "allow_np_array": False, "momentum": 0.0,
                                      "lazy_update": True},
             "lr_mult": [], "wd_mult": [], "named_lr_mult": {}, "named_wd_mult": {},
             "idx2name": [], "lr_scheduler": None}


def forgeries(rounds_from: int, holds_dc1_key: bool) -> dict:
    """What each target gets: what once was summed into the model, stopped a server, made
    a replica diverge, or ended the run (issue 11's measurements). Whoever holds dc1's key
    *is* dc1 and may send dc1's chunks (a compromised DC is out of authentication's reach,
    see docs/security.md), so it sends dc0's server only what dc1 may not."""
    poison = np.full(int(np.prod(SHAPE)), 1e6, np.float32)
    chunks = [Message(Kind.CHUNK_UP, sender=SERVER_DC0, key=0, seq=r, policy=v,
                      dtype=np.float32, frames=[poison])
              for r in range(rounds_from, rounds_from + 4) for v in (0, 1)]
    as_scheduler = [Message(Kind.ABORT, sender=SCHEDULER, meta={"reason": "forged abort"}),
                    Message(Kind.SHUTDOWN, sender=SCHEDULER)]
    return {
        "server dc0": as_scheduler + [
            Message(Kind.SET_OPTIMIZER, sender=WORKER_DC0, request=1 << 40,
                    meta={"spec": SGD_LR_99}),
            *[Message(c.kind, sender=SERVER_DC1, key=0, seq=c.seq, policy=c.policy,
                      dtype=np.float32, frames=c.frames)
              for c in ([] if holds_dc1_key else chunks)]],
        "server dc1": chunks,
        "worker dc0/0": [Message(Kind.ABORT, sender=SCHEDULER, meta={"reason": "forged"})],
        "scheduler": [Message(Kind.BYE, sender=WORKER_DC0,
                              meta={"clean": False, "reason": "forged failure"}),
                      Message(Kind.ABORT, sender=SERVER_DC0, meta={"reason": "forged"}),
                      Message(Kind.REGISTER, meta={"role": "worker", "dc": "dc0",
                                                   "address": "tcp://127.0.0.1:1"})],
    }


def attack(ctx, cluster, pair, rounds_from: int, holds_dc1_key: bool) -> list:
    """Send every forgery to its target with ``pair`` (None: plain ZeroMQ, no key); the
    sockets, to be closed once their messages had time to go out."""
    sockets = []
    for target, messages in forgeries(rounds_from, holds_dc1_key).items():
        sock = ctx.socket(zmq.DEALER)
        sockets.append(sock)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDTIMEO, 2000)
        if pair is not None:
            sock.curve_serverkey = cluster.public_keys[target]
            sock.curve_publickey, sock.curve_secretkey = pair.public, pair.secret
        sock.connect(cluster.addresses[target])
        for msg in messages:
            try:
                sock.send_multipart(wire.encode(msg))
            except zmq.Again:           # refused at the handshake: the queue fills up
                break
    return sockets


def test_foreign_peers_are_refused_and_the_run_is_unaffected(no_leftovers):
    cluster = Cluster(no_leftovers)
    dc0, dc1 = cluster.workers
    cluster.addresses = {"server dc0": dc0["server"], "server dc1": dc1["server"],
                         "worker dc0/0": dc0["address"], "scheduler": dc0["scheduler"]}
    own = {"dc0": read_key_pair(dc0["key_file"]), "dc1": read_key_pair(dc1["key_file"])}
    cluster.public_keys = {"server dc0": own["dc0"].public, "worker dc0/0": own["dc0"].public,
                           "server dc1": own["dc1"].public,
                           "scheduler": dc0["scheduler_key"].encode()}
    ctx = zmq.Context()
    with cluster.attacked(ctx):
        for pair in (None, KeyPair.generate(), own["dc1"]):   # no key, a stranger's, dc1's
            sockets = attack(ctx, cluster, pair, cluster.rounds() + 1, pair is own["dc1"])
            time.sleep(1.0)
            for sock in sockets:
                sock.close(linger=0)
            assert not cluster.dead(), cluster.dead()
        rounds = cluster.rounds()
        time.sleep(1.0)
        assert cluster.rounds() > rounds, "training stopped during the attacks"
        cluster.stop_after(FINAL_ROUNDS)
    run = cluster.exact_run()
    server0 = "\n".join(run.lines("server dc0"))
    assert "refused a connection from 127.0.0.1: unknown key" in server0     # the stranger
    for forged in ("ABORT claims to come from scheduler (node 0) but was sent with the key "
                   "of DC dc1", "SHUTDOWN claims to come from scheduler (node 0) but",
                   "SET_OPTIMIZER claims to come from worker rank 0 (dc0/0, node 3) but"):
        assert forged in server0, forged
    # a worker admits only its own DC's key and the scheduler's: dc1's key is a stranger's
    assert "\n".join(run.lines("worker dc0/0")).count("refused a connection") >= 2
    assert "CHUNK_UP claims to come from server of dc0 (node 1) but was sent with the key " \
           "of DC dc1" in "\n".join(run.lines("server dc1"))
    scheduler = "\n".join(run.lines("scheduler"))
    assert "BYE claims to come from worker rank 0 (dc0/0, node 3) but was sent with the " \
           "key of DC dc1" in scheduler
    assert "ABORT claims to come from worker" not in scheduler
    assert "forged" not in "\n".join(l for l in run.output.splitlines() if "ERROR" in l)
