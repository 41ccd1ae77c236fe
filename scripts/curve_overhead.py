#!/usr/bin/env python3
"""What CURVE costs on this machine: one DEALER -> ROUTER stream of 1 MiB messages on loopback,
plain, with CURVE (ZAP admitting any key) and, when the compiled data plane is built, plain
sockets carrying frames sealed with the bulk channel's AEGIS-256 (the sender seals header and
payload into one of four reused send buffers and sends it zero-copy, the receiver opens each
frame in place in libzmq's buffer), alternating, three times each.

    python scripts/curve_overhead.py [--messages 200] [--bytes 1048576]

Prints GB/s and CPU-seconds per GB (this process: both ends and ZeroMQ's I/O threads), then
the cipher alone (seal + open of the same messages, no sockets).
"""
import argparse
import os
import threading
import time

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

try:
    from netstorm.geoserver import _dataplane
except ImportError:
    _dataplane = None
HEADER = bytes(38)                  # stands for the wire header sealed with each payload


def aegis_unavailable() -> str:
    if _dataplane is None:
        return "the compiled data plane is not built"
    return _dataplane.bulk_unavailable()


def stream(curve: bool, messages: int, size: int, aegis: bool = False) -> tuple:
    ctx = zmq.Context()
    auth = None
    router, dealer = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    if curve:
        auth = ThreadAuthenticator(ctx)
        auth.start()
        auth.configure_curve(domain="*", location=zmq.auth.CURVE_ALLOW_ANY)
        server_public, server_secret = zmq.curve_keypair()
        client_public, client_secret = zmq.curve_keypair()
        router.curve_secretkey, router.curve_publickey = server_secret, server_public
        router.curve_server = True
        dealer.curve_secretkey, dealer.curve_publickey = client_secret, client_public
        dealer.curve_serverkey = server_public
    port = router.bind_to_random_port("tcp://127.0.0.1")
    dealer.connect(f"tcp://127.0.0.1:{port}")
    payload = bytes(size)
    dealer.send_multipart([b"h", payload])
    router.recv_multipart()                       # connected (and handshaken)
    wall, cpu = time.perf_counter(), time.process_time()
    if aegis:
        key = os.urandom(32)
        sealer, opener = _dataplane.BulkSealer(key, 0, 1, 0), _dataplane.BulkOpener(key, 0, 1, 0)
        pool = [bytearray(len(HEADER) + size + _dataplane.BULK_OVERHEAD) for _ in range(4)]
        sent = [None] * len(pool)

        def seal_and_send():        # sealed into a few reused send buffers, sent zero-copy
            for i in range(messages):
                slot = i % len(pool)
                if sent[slot] is not None:
                    sent[slot].wait()
                sealer.seal_into(pool[slot], HEADER, payload)
                sent[slot] = dealer.send(pool[slot], copy=False, track=True)
        sender = threading.Thread(target=seal_and_send)
    else:
        sender = threading.Thread(target=lambda: [
            dealer.send_multipart([b"h", payload], copy=False) for _ in range(messages)])
    sender.start()
    for _ in range(messages):
        frames = router.recv_multipart(copy=False)
        if aegis:
            opener.open_in_place(frames[1])
    sender.join()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    dealer.close(0)
    router.close(0)
    if auth is not None:
        auth.stop()
    ctx.term()
    gigabytes = messages * size / 1e9
    return gigabytes / wall, cpu / gigabytes


def cipher_only(messages: int, size: int) -> tuple:
    """Seal and open `messages` messages of `size` bytes with no sockets: the cipher's share."""
    key, payload = os.urandom(32), bytes(size)
    sealer, opener = _dataplane.BulkSealer(key, 0, 1, 0), _dataplane.BulkOpener(key, 0, 1, 0)
    frame = bytearray(len(HEADER) + size + _dataplane.BULK_OVERHEAD)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(messages):
        sealer.seal_into(frame, HEADER, payload)
        opener.open_in_place(frame)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    gigabytes = messages * size / 1e9
    return gigabytes / wall, cpu / gigabytes


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=200)
    p.add_argument("--bytes", type=int, default=1 << 20)
    args = p.parse_args()
    why = aegis_unavailable()
    if why:
        print(f"aegis: not measured ({why})", flush=True)
    kinds = ("plain", "curve") + (() if why else ("aegis",))
    for _ in range(3):
        for kind in kinds:
            rate, cpu = stream(kind == "curve", args.messages, args.bytes, kind == "aegis")
            print(f"{kind}: {rate:.2f} GB/s, {cpu:.2f} CPU-s per GB", flush=True)
    if not why:
        for _ in range(3):
            rate, cpu = cipher_only(args.messages, args.bytes)
            print(f"aegis seal+open only: {rate:.2f} GB/s, {cpu:.2f} CPU-s per GB", flush=True)


if __name__ == "__main__":
    main()
