"""worker/join.py with real sockets: a worker binds the lowest free port of its range,
passes over ports held by others, advertises its address, and fails naming the range when
every port is taken."""

import socket

import pytest
from launching import free_port

from netstorm.geoserver.worker.join import open_van, port_free
from netstorm.geoserver.worker.settings import KVStoreError, WorkerSettings


def settings(ports: str, advertise: str = "") -> WorkerSettings:
    return WorkerSettings(scheduler="tcp://127.0.0.1:9", dc="eu", host="127.0.0.1",
                          insecure="1", ports=ports, advertise=advertise)


def port_of(van) -> int:
    return int(van.address.rsplit(":", 1)[1])


def test_a_worker_takes_the_lowest_free_port_of_its_range_and_advertises_its_address():
    low = free_port()
    span = f"{low}-{low + 20}"
    with socket.socket() as held:
        held.bind(("127.0.0.1", low))
        held.listen()
        free = [p for p in range(low, low + 21) if port_free("127.0.0.1", p)]
        first = open_van(settings(span, advertise="198.51.100.7"))
        second = open_van(settings(span))
        try:
            assert low not in free and port_of(first) == free[0]    # the lowest free one
            assert first.address == f"tcp://198.51.100.7:{free[0]}"
            assert second.address.startswith("tcp://127.0.0.1:")
            assert free[0] < port_of(second) <= low + 20
        finally:
            first.close()
            second.close()


def test_a_worker_whose_range_is_taken_fails_naming_it():
    low = free_port()
    with socket.socket() as held:
        held.bind(("127.0.0.1", low))
        held.listen()
        with pytest.raises(KVStoreError, match=f"no free port in worker_ports {low}-{low} "
                                               f"on 127.0.0.1: its 1 port\\(s\\) are all"):
            open_van(settings(f"{low}"))
    van = open_van(settings(""))        # no range: any free port
    try:
        assert van.address.startswith("tcp://127.0.0.1:")
    finally:
        van.close()
