"""Who may send what to whom: every message kind's admitted senders, checked on receipt.

The routes are declared per kind in :mod:`.kinds`; this module derives its checks from them.

The sender id in a header is a claim; the principal (the key the peer proved it holds, see
:mod:`netstorm.geoserver.core.security`) is a fact. A message is admitted when

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

from .kinds import (ADMITTED, FROM_NODE, FROM_OTHER_SERVER, FROM_OWN_SERVER, FROM_OWN_WORKER,
                    FROM_SCHEDULER, KINDS, WELCOMING)
from .nodes import SCHEDULER, SERVER, WORKER, NodeInfo, NodeTable
from ..config.keys import describe as _principal
from .wire import Message

__all__ = ["ACCEPTS", "FROM_NODE", "FROM_OTHER_SERVER", "FROM_OWN_SERVER", "FROM_OWN_WORKER",
           "FROM_SCHEDULER", "WELCOME_KINDS", "refusal", "register_refusal", "relation",
           "welcome_refusal"]

# receiving role -> relation of the sender -> kinds taken (after the WELCOME), and
# (receiving role, relation, kind) -> the one role that may send it (None: any), from the
# routes of geoserver/core/kinds.py
def _admitted() -> tuple:
    accepts, sender_role = {SCHEDULER: {}, SERVER: {}, WORKER: {}}, {}
    for spec in KINDS.values():
        for route in spec.routes:
            if route.check == ADMITTED:
                accepts[route.to].setdefault(route.sender, set()).add(spec.kind)
                sender_role[(route.to, route.sender, spec.kind)] = route.role
    return accepts, sender_role


ACCEPTS, _SENDER_ROLE = _admitted()
# what a node takes before its WELCOME: the scheduler's answer to its REGISTER
WELCOME_KINDS = frozenset(spec.kind for spec in KINDS.values()
                          if any(route.check == WELCOMING for route in spec.routes))


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
    route = (me.role, how, msg.kind)
    if route not in _SENDER_ROLE or _SENDER_ROLE[route] not in (None, sender.role):
        return f"{sender.describe()} may not send {msg.kind.name} to {me.describe()}"
    return ""


def welcome_refusal(msg: Message) -> str:
    """Before its WELCOME a node knows no table: it takes the scheduler's answer to its
    REGISTER (WELCOME, ERROR or ABORT) only from the scheduler's key. Other messages wait
    for the table and are checked by :func:`refusal` then."""
    if msg.kind in WELCOME_KINDS and msg.origin not in (None, ""):
        return f"{msg.kind.name} before the WELCOME was sent with the key of " \
               f"{_principal(msg.origin)}, not the scheduler's"
    return ""


def register_refusal(meta: dict, origin: str | None) -> str:
    """A REGISTER may only name the DC whose key it was sent with."""
    if origin is None or meta.get("dc") == origin:
        return ""
    return f"registration as a {meta.get('role')} of DC {meta.get('dc')!r} was sent with " \
           f"the key of {_principal(origin)}"
