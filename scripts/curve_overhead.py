#!/usr/bin/env python3
"""What CURVE costs on this machine: one DEALER -> ROUTER stream of 1 MiB messages on loopback,
plain and with CURVE (ZAP admitting any key), alternating, three times each.

    python scripts/curve_overhead.py [--messages 200] [--bytes 1048576]

Prints GB/s and CPU-seconds per GB (this process: both ends and ZeroMQ's I/O threads).
"""
import argparse
import threading
import time

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator


def stream(curve: bool, messages: int, size: int) -> tuple:
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
    sender = threading.Thread(target=lambda: [dealer.send_multipart([b"h", payload], copy=False)
                                              for _ in range(messages)])
    sender.start()
    for _ in range(messages):
        router.recv_multipart(copy=False)
    sender.join()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    dealer.close(0)
    router.close(0)
    if auth is not None:
        auth.stop()
    ctx.term()
    gigabytes = messages * size / 1e9
    return gigabytes / wall, cpu / gigabytes


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=200)
    p.add_argument("--bytes", type=int, default=1 << 20)
    args = p.parse_args()
    for _ in range(3):
        for curve in (False, True):
            rate, cpu = stream(curve, args.messages, args.bytes)
            print(f"{'curve' if curve else 'plain'}: {rate:.2f} GB/s, "
                  f"{cpu:.2f} CPU-s per GB", flush=True)


if __name__ == "__main__":
    main()
