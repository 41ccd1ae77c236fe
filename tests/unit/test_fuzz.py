"""Fuzzing a live cluster (issue 11, part 5, malformed messages): a few thousand malformed and
adversarial messages (tests/fuzz_messages.py) go to a server's, the scheduler's and a
worker's port while the workers train with exact sums. The fuzzer holds dc0's CURVE key (a
compromised host inside a DC: the worst case, since a stranger is refused at the handshake).
No process may crash or hang, every round's sum must stay exact, and no server or scheduler
may grow by 10% or more in RSS.
When a process dies, the last batches are replayed on fresh clusters, narrowing down to the
one message that kills it alone; the failure names it (category, kind, field, value) with
the process's traceback. Each cluster's output stays in its tmp dir as cluster.log.

The quick tests check the generator itself: deterministic, every kind and category, every
meta field the code reads, and no well-formed order (those are the foreign-peer tests').
"""

import json
import re
import time
from pathlib import Path
import pytest
import zmq
from launching import REPO
from live_cluster import Cluster
from fuzz_messages import (CATEGORIES, FIELD_TYPES, HEADER, KINDS, MAGIC, Kind, generate,
                           obeyed)

SEED = 11
BATCH = 25                  # messages sent to every target before looking who is alive
BATCH_BYTES = 1 << 20
# Issue 11's bound. Over 18 runs the scheduler grew 4.2-5.2% and the fuzzed server 5.6-6.7%
# (docs/security.md); before per-kind meta limits and malloc_trim, 6.8-11.6%. Earlier leaks
# were far larger: +464% (a malformed SET_OPTIMIZER imported mxnet), +52% (a stranger's
# 16 MiB frames kept by glibc), +35% (the scheduler took 16 MiB frames).
RSS_LIMIT = 0.10
SUSPECT_BATCHES = 12        # batches replayed to find what killed a process
FINAL_ROUNDS = 15           # rounds trained after the fuzzing, before the workers stop


@pytest.fixture(scope="module")
def messages():
    return generate(SEED)


# ---------------------------------------------------------------- the generator
def test_generator_is_deterministic(messages):
    again = generate(SEED)
    assert [m.frames for m in again] == [m.frames for m in messages]
    assert [m.frames for m in generate(SEED + 1)] != [m.frames for m in messages]


def test_generator_covers_every_kind_and_category(messages):
    assert 2000 <= len(messages) <= 6000
    assert tuple(dict.fromkeys(m.category for m in messages)) == CATEGORIES
    claimed = {HEADER.unpack(m.frames[0])[2] for m in messages
               if len(m.frames[0]) == HEADER.size and m.frames[0][:2] == MAGIC}
    assert {int(k) for k in Kind} <= claimed
    assert set(range(256)) - KINDS <= claimed              # and every unknown kind code
    assert all(isinstance(f, bytes) for m in messages for f in m.frames)


def test_generator_sends_no_order_a_node_must_obey(messages):
    """Decodable messages carry no well-formed order and no request id a worker waits for
    (refusing those takes authentication, not decoding)."""
    for m in messages:
        if len(m.frames) < 2 or len(m.frames[0]) != HEADER.size:
            continue
        _, _, kind, sender, *_, request = HEADER.unpack(m.frames[0])
        assert request == 0 or request >= 1 << 32, m.describe()
        try:
            meta = json.loads(m.frames[1]) if m.frames[1] else {}
        except (ValueError, RecursionError):
            continue
        assert kind not in KINDS or not obeyed(Kind(kind), sender, meta), m.describe()


def test_every_meta_field_the_code_reads_is_fuzzed():
    read = set()
    for folder in ("geoserver", "scheduler", "kvstore"):
        for path in (REPO / folder).rglob("*.py"):
            read |= set(re.findall(r"meta(?:\.get\(|\[)\s*[\"'](\w+)[\"']", path.read_text()))
    assert read and read <= set(FIELD_TYPES), sorted(read - set(FIELD_TYPES))


# ---------------------------------------------------------------- the live cluster
def batches(messages, size: int) -> list:
    """Consecutive messages of one category, at most ``size`` of them and BATCH_BYTES."""
    out = []
    for m in messages:
        last = out[-1] if out else None
        if last and last[0].category == m.category and len(last) < size and \
                sum(sum(map(len, x.frames)) for x in last + [m]) <= BATCH_BYTES:
            last.append(m)
        else:
            out.append([m])
    return out


def fuzz(cluster: Cluster, targets: list, messages: list, size: int, settle: float,
         watch=None) -> list:
    """Send ``messages`` to ``targets`` (a fresh DEALER per category and target) in batches,
    waiting ``settle`` s (plus transfer time) after each; stop once a process in ``watch``
    (default: any) has died. The batches sent, in order."""
    ctx = zmq.Context()
    sockets, category, sent = {}, None, []
    try:
        for batch in batches(messages, size):
            if batch[0].category != category:
                category = batch[0].category
                for name in targets:
                    sock = ctx.socket(zmq.DEALER)
                    sock.setsockopt(zmq.SNDHWM, 0)
                    sock.setsockopt(zmq.SNDTIMEO, 5000)
                    sock.curve_serverkey = cluster.server_keys[name]
                    sock.curve_publickey = cluster.pair.public
                    sock.curve_secretkey = cluster.pair.secret
                    sock.connect(cluster.targets[name])
                    sockets.setdefault(name, []).append(sock)
            for name in targets:
                for m in batch:
                    sockets[name][-1].send_multipart(m.frames, copy=False)
            sent.append(batch)
            time.sleep(settle + sum(sum(map(len, m.frames)) for m in batch) / 50e6)
            if set(cluster.dead()) & set(watch or cluster.procs):
                break
        else:
            time.sleep(0.5)
        return sent
    finally:
        for socks in sockets.values():
            for sock in socks:
                sock.close(linger=0)
        ctx.term()


def output_of(run, name: str) -> str:
    """``name``'s last traceback (through its exception line), else its last lines, and
    the launcher's lines."""
    mine = run.lines(name)
    start = max((i for i, line in enumerate(mine) if "Traceback" in line), default=None)
    if start is None:
        return "\n".join(mine[-8:] + run.lines("launch"))
    tail = []
    for line in mine[start:]:
        tail.append(line)
        text = line.split("] ", 1)[-1]
        if len(tail) > 1 and text.strip() and not text.startswith(" "):
            break
    return "\n".join(tail + run.lines("launch"))


# Replays that narrow down what killed a process: (batch size, settle s, batches kept as
# suspects). A death shows up to ~0.5 s late (the dying node closes its sockets first).
PINPOINT = ((BATCH, 0.3, 2), (1, 0.15, 4), (1, 0.8, 1))


def pinpoint(tmp: Path, culprit: str, suspects: list) -> str:
    """Replay ``suspects`` on fresh clusters, to the port that can reach ``culprit`` only,
    in ever smaller steps (:data:`PINPOINT`). Returns the message that killed it alone (with
    its output), or why that could not be told."""
    port = {"scheduler": "scheduler", "worker dc0/0": "worker dc0/0"}.get(culprit,
                                                                         "server dc0")
    for step, (size, settle, keep) in enumerate(PINPOINT):
        cluster = Cluster(tmp / f"pinpoint-{step}")
        try:
            sent = fuzz(cluster, [port], suspects, size, settle, watch=[culprit])
            died = culprit in cluster.dead()
        finally:
            if not cluster.dead():
                cluster.kill()
            run = cluster.join()
        if not died:
            return (f"not reproduced by sending these {len(suspects)} messages alone to the "
                    f"{port} port:\n  " + "\n  ".join(m.describe() for m in suspects[:10]))
        suspects = [m for batch in sent[-keep:] for m in batch]
    (message,) = suspects
    return (f"killed by this one message alone, sent to the {port} port:\n  "
            f"{message.describe()}\n  frames[:2]: {[f[:120] for f in message.frames[:2]]}\n"
            f"{output_of(run, culprit)}")
