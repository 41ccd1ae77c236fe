"""scheduler/rejoin.py: which dead workers and servers are awaited, and who comes back as
whom."""
from netstorm.geoserver.core.nodes import SERVER, WORKER, NodeInfo
from netstorm.scheduler.rejoin import LostNodes

W = NodeInfo(5, WORKER, "eu", "tcp://10.0.0.2:4000", rank=3, local_rank=1, host="a",
             local_address="ipc:///tmp/a/node.sock")
S = NodeInfo(1, SERVER, "eu", "tcp://10.0.0.1:9100")
BACK = {"role": "worker", "dc": "eu", "local_index": 1, "address": "tcp://10.0.0.2:4100",
        "host": "b", "local_address": "ipc:///tmp/b/node.sock", "pid": 7}


def test_a_worker_is_awaited_until_its_deadline_and_comes_back_in_its_rank():
    lost = LostNodes(restarts=1, timeout_s=30)
    assert lost.lose(W, now=100.0, why="sent nothing")
    assert W.id in lost and lost.remaining(W.id) == 0
    assert lost.overdue(129.0) == [] and lost.overdue(131.0)[0].node == W
    node, why = lost.rejoin(BACK)
    assert why == "" and W.id not in lost
    assert (node.id, node.rank, node.local_rank, node.dc) == (5, 3, 1, "eu")
    assert (node.address, node.host, node.local_address) == \
        ("tcp://10.0.0.2:4100", "b", "ipc:///tmp/b/node.sock")
    assert not lost.lose(W, now=200.0, why="again")     # its one restart is used


def test_no_restarts_no_servers_and_strangers_are_refused():
    assert not LostNodes(restarts=0, timeout_s=30).lose(W, 0.0, "dead")
    lost = LostNodes(restarts=2, timeout_s=30)
    assert not lost.lose(S, 0.0, "dead")                # no server_restarts: not awaited
    assert lost.rejoin(BACK) == (None, "the cluster is running and no worker eu/1 is "
                                       "awaited (awaited: none)")
    lost.lose(W, 0.0, "dead")
    assert "no worker eu/0 is awaited (awaited: worker rank 3 (eu/1, node 5))" in \
        lost.rejoin({**BACK, "local_index": 0})[1]
    assert "no worker us/1" in lost.rejoin({**BACK, "dc": "us"})[1]
    assert "no server of eu is awaited" in lost.rejoin({**BACK, "role": "server"})[1]
    assert "a scheduler cannot join" in lost.rejoin({**BACK, "role": "scheduler"})[1]
    assert "no valid address" in lost.rejoin({**BACK, "local_address": "tcp://x:1"})[1]
    assert "no valid address" in lost.rejoin({**BACK, "address": 3})[1]
    assert W.id in lost                                  # none of those took its place


def test_a_server_is_awaited_with_server_restarts_and_comes_back_into_its_dc():
    lost = LostNodes(restarts=0, timeout_s=30, server_restarts=1)
    assert not lost.lose(W, 0.0, "dead")                # workers have no restarts here
    assert lost.lose(S, now=10.0, why="was replaced by a new process")
    assert lost.remaining(S.id, SERVER) == 0
    assert "no server of us" in lost.rejoin({**BACK, "role": "server", "dc": "us"})[1]
    node, why = lost.rejoin({**BACK, "role": "server", "local_index": -1})
    assert why == "" and (node.id, node.role, node.dc) == (1, SERVER, "eu")
    assert node.address == "tcp://10.0.0.2:4100" and S.id not in lost
    assert not lost.lose(S, 20.0, "again")              # its one restart is used
