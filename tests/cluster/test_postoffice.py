"""postoffice: the tests that start processes or open sockets; the rest, and the helpers
both use, are in tests/unit/test_postoffice.py."""

import numpy as np
import pytest
from netstorm.geoserver.core import wire
from netstorm.geoserver.core.postoffice import Postoffice, RendezvousError
from netstorm.geoserver.config.settings import RuntimeSettings
from netstorm.geoserver.core.van import Van
from unit.test_postoffice import register
from unit.test_postoffice import node  # noqa: F401  (fixtures)



def test_messages_arriving_before_welcome_are_kept_for_the_node(node):
    po, sched, peer = node
    peer.send("n", wire.Message(wire.Kind.CHUNK_UP, key=4, dtype=np.float32,
                                frames=[np.ones(2, np.float32)]))   # beats the WELCOME
    me = register(po, sched)
    assert me.id == 1
    early = po.take_early()
    assert [m.kind for m in early] == [wire.Kind.CHUNK_UP] and early[0].key == 4
    assert po.take_early() == []
    assert po.settings == RuntimeSettings() and po.welcome_policy is None


def test_messages_before_the_welcome_that_the_table_refuses_are_dropped(node, caplog):
    po, sched, peer = node
    peer.node_id = 7                                     # not in the table
    peer.send("n", wire.Message(wire.Kind.CHUNK_UP, key=4, dtype=np.float32,
                                frames=[np.ones(2, np.float32)]))
    peer.node_id = 2                                     # dc1's server may not send that
    peer.send("n", wire.Message(wire.Kind.SHUTDOWN))
    register(po, sched)
    assert po.take_early() == []
    assert "node 7, which is not in the cluster" in caplog.text
    assert "server of dc1 (node 2) may not send SHUTDOWN" in caplog.text


def test_bad_settings_in_the_welcome_are_a_clear_error_naming_the_field(node):
    po, sched, _ = node
    settings = dict(RuntimeSettings().to_json(), heartbeat_s="fast")
    with pytest.raises(RendezvousError, match="server in dc0: bad settings from the "
                                              "scheduler: RuntimeSettings: heartbeat_s must "
                                              "be a number, got 'fast'"):
        register(po, sched, settings=settings)


@pytest.mark.parametrize("insecure", [False, True])
def test_a_node_refused_at_the_handshake_fails_at_once_naming_the_scheduler(tmp_path,
                                                                           insecure):
    """Keys of another cluster, or no CURVE against a secure scheduler: ZeroMQ refuses the
    handshake, and registration says so instead of waiting 2 x timeout_s for an answer."""
    from netstorm.geoserver.core.security import credentials_for
    from netstorm.geoserver.config.keys import generate_cluster_keys
    ours = generate_cluster_keys(["dc0"], tmp_path / "ours")
    theirs = generate_cluster_keys(["dc0"], tmp_path / "theirs")
    sched = Van("sched", "127.0.0.1", 0, credentials=credentials_for(ours, ""))
    node_van = Van("node", "127.0.0.1", 0, wakeable=True,
                   credentials=None if insecure else credentials_for(theirs, "dc0"))
    try:
        po = Postoffice(node_van, sched.address, "worker", "dc0")
        with pytest.raises(RendezvousError, match=rf"worker in dc0: the scheduler at "
                                                  rf"{sched.address} refused the handshake"):
            po.register(5)
    finally:
        node_van.close()
        sched.close()
