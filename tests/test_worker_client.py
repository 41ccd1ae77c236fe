import pytest

from netstorm.geoserver.worker_client import KVStoreError, WorkerSettings


def test_settings_from_environment():
    s = WorkerSettings.from_env({"NETSTORM_SCHEDULER": "tcp://10.0.0.1:9000",
                                 "NETSTORM_DC": "eu", "NETSTORM_LOCAL_INDEX": "3",
                                 "NETSTORM_TIMEOUT_S": "2.5", "NETSTORM_HOST": "10.0.0.2"})
    assert s == WorkerSettings("tcp://10.0.0.1:9000", "eu", "10.0.0.2", 3, 2.5)


def test_missing_settings_name_the_variables_and_the_launcher():
    with pytest.raises(KVStoreError, match="NETSTORM_SCHEDULER, NETSTORM_DC not set.*launch.py"):
        WorkerSettings.from_env({})


def test_malformed_settings_are_clear():
    with pytest.raises(KVStoreError, match="bad netstorm environment variable"):
        WorkerSettings.from_env({"NETSTORM_SCHEDULER": "tcp://x:1", "NETSTORM_DC": "eu",
                                 "NETSTORM_LOCAL_INDEX": "first"})


def test_a_message_that_upsets_dispatch_is_logged_and_the_io_thread_goes_on(caplog):
    import logging

    from netstorm.geoserver.nodes import NodeInfo
    from netstorm.geoserver.ratelog import RateLimitedLog
    from netstorm.geoserver.wire import Kind, Message
    from netstorm.geoserver.worker_client import WorkerClient, log

    client = WorkerClient.__new__(WorkerClient)          # no sockets: only what dispatch uses
    client.me = NodeInfo(3, "worker", "eu", "tcp://127.0.0.1:1", rank=1, local_rank=0)
    client._drops = RateLimitedLog(log)

    def upset(msg):
        raise TypeError("unexpected reply layout")
    client._dispatch = upset
    with caplog.at_level(logging.WARNING):
        client._dispatch_safely(Message(Kind.VALUE, sender=1))
    assert "worker 1: dropped VALUE from node 1: TypeError('unexpected reply layout')" \
        in caplog.text
