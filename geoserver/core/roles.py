"""Who may send what to whom: every message kind's admitted senders, checked on receipt.

The sender id in a header is a claim; the principal (the key the peer proved it holds, see
:mod:`netstorm.geoserver.security`) is a fact. A message is admitted when

1. its claimed sender is a node of the table,
2. that node belongs to the principal (its DC, or the scheduler), so one DC cannot speak as
   another DC's node or as the scheduler, and
3. the receiving node takes that kind from a node in that relation to itself: control only
   from the scheduler, chunks only from other DCs' servers, requests only from this DC's
   workers, replies only from this DC's server.

Without CURVE (``origin`` None) only 1 and 3 are checked, on the claimed id. Pure: no
sockets, no clock. O(1) per message.
"""
from __future__ import annotations

from .nodes import SCHEDULER, SERVER, WORKER, NodeInfo, NodeTable
from ..config.keys import describe as _principal
from .wire import Kind, Message

# how a sender relates to the receiving node
FROM_SCHEDULER = "the scheduler"
FROM_OWN_SERVER = "this DC's server"
FROM_OWN_WORKER = "a worker of this DC"
FROM_OTHER_SERVER = "another DC's server"
FROM_NODE = "a node"                     # anything but the scheduler, at the scheduler

_CONTROL = {Kind.ABORT, Kind.SHUTDOWN, Kind.POLICY, Kind.PROBE_REQUEST, Kind.ROUTES,
            Kind.ROUND_OPEN, Kind.HEARTBEAT, Kind.WORKER_LEFT}
_REQUESTS = {Kind.INIT, Kind.PUSH, Kind.PULL, Kind.SET_OPTIMIZER, Kind.SAVE_STATES,
             Kind.LOAD_STATES}
_REPLIES = {Kind.INIT_DONE, Kind.VALUE, Kind.OPTIMIZER_DONE, Kind.STATES, Kind.ERROR}

# receiving role -> relation of the sender -> kinds taken (after the WELCOME)
ACCEPTS = {
    SCHEDULER: {FROM_NODE: {Kind.HEARTBEAT, Kind.BARRIER, Kind.BYE, Kind.ABORT,
                            Kind.PROBE_REPORT, Kind.STATE_REPORT, Kind.RECOVERED}},
    SERVER: {FROM_SCHEDULER: _CONTROL | {Kind.NODE_MOVED, Kind.RECOVER, Kind.REPLAY},
             FROM_OWN_WORKER: _REQUESTS | {Kind.RESUME},
             FROM_OTHER_SERVER: {Kind.INIT, Kind.CHUNK_UP, Kind.CHUNK_DOWN, Kind.PROBE,
                                 Kind.RELAY, Kind.UPDATE, Kind.STATE_REQUEST, Kind.STATE}},
    WORKER: {FROM_SCHEDULER: {Kind.ABORT, Kind.BARRIER_DONE, Kind.HEARTBEAT,
                              Kind.WORKER_LEFT, Kind.NODE_MOVED},
             FROM_OWN_SERVER: _REPLIES | {Kind.RESUMED}},
}
# which node sends which kind at the scheduler: BARRIER and BYE come from workers only,
# PROBE_REPORT from servers only
_SCHEDULER_FROM_ROLE = {Kind.BARRIER: WORKER, Kind.BYE: WORKER, Kind.PROBE_REPORT: SERVER,
                        Kind.STATE_REPORT: SERVER, Kind.RECOVERED: SERVER}


def relation(me: NodeInfo, sender: NodeInfo) -> str:
    """How ``sender`` relates to the receiving node ``me`` ("" for none that sends)."""
    if sender.role == SCHEDULER:
        return FROM_SCHEDULER
    if me.role == SCHEDULER:
        return FROM_NODE
    if sender.role == SERVER:
        if sender.dc == me.dc:
            return FROM_OWN_SERVER if sender.id != me.id else ""
        return FROM_OTHER_SERVER
    if sender.role == WORKER and sender.dc == me.dc:
        return FROM_OWN_WORKER
    return ""


def refusal(table: NodeTable, me: NodeInfo, msg: Message) -> str:
    """Why ``me`` must drop ``msg`` ("" when it is admitted)."""
    sender = table.nodes.get(msg.sender)
    if sender is None:
        return f"{msg.kind.name} claims to come from node {msg.sender}, which is not in " \
               f"the cluster"
    if msg.origin is not None and msg.origin != sender.dc:
        return f"{msg.kind.name} claims to come from {sender.describe()} but was sent with " \
               f"the key of {_principal(msg.origin)}"
    how = relation(me, sender)
    role = _SCHEDULER_FROM_ROLE.get(msg.kind) if me.role == SCHEDULER else None
    if msg.kind not in ACCEPTS[me.role].get(how, ()) or role not in (None, sender.role):
        return f"{sender.describe()} may not send {msg.kind.name} to {me.describe()}"
    return ""


def welcome_refusal(msg: Message) -> str:
    """Before its WELCOME a node knows no table: it takes the scheduler's answer to its
    REGISTER (WELCOME, ERROR or ABORT) only from the scheduler's key. Other messages wait
    for the table and are checked by :func:`refusal` then."""
    if msg.kind in (Kind.WELCOME, Kind.ERROR, Kind.ABORT) and msg.origin not in (None, ""):
        return f"{msg.kind.name} before the WELCOME was sent with the key of " \
               f"{_principal(msg.origin)}, not the scheduler's"
    return ""


def register_refusal(meta: dict, origin: str | None) -> str:
    """A REGISTER may only name the DC whose key it was sent with."""
    if origin is None or meta.get("dc") == origin:
        return ""
    return f"registration as a {meta.get('role')} of DC {meta.get('dc')!r} was sent with " \
           f"the key of {_principal(origin)}"
