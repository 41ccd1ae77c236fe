"""A worker's small requests held for a moment and sent to its DC server as one BATCH
(:mod:`netstorm.geoserver.core.batch`), like Horovod's tensor fusion. Pure: no sockets, no
clock (times are passed in)."""
from __future__ import annotations

from ..core.batch import MAX_MESSAGES, pack
from ..core.wire import Message, payload_bytes

__all__ = ["MAX_BATCH_BYTES", "Outbox"]

MAX_BATCH_BYTES = 4 << 20   # an outbox sends at once when its frames reach this many bytes


class Outbox:
    """A worker's small requests waiting to go to its DC server together.

    :meth:`add` says what the caller must do: ``WAKE`` (the first message: tell the
    thread that sends to send by :meth:`due`), ``SEND`` (it is full: send now) or nothing.
    The sending thread :meth:`take`\\ s what gathered once :meth:`due` has passed.
    ``linger_s``: how long the first message waits for others (0: until the sending thread
    next looks). Not thread-safe: its owner holds a lock."""

    WAKE, SEND, NONE = "wake", "send", ""

    def __init__(self, linger_s: float, max_bytes: int = MAX_BATCH_BYTES,
                 max_messages: int = MAX_MESSAGES):
        self.linger_s, self.max_bytes, self.max_messages = linger_s, max_bytes, max_messages
        self.messages: list = []
        self.bytes = 0
        self._due: float | None = None
        self.batches = 0            # BATCHes taken (several messages each)
        self.fused = 0              # messages they carried

    def add(self, msg: Message, now: float) -> str:
        """Keep ``msg`` to send later. O(frames of msg)."""
        self.messages.append(msg)
        self.bytes += payload_bytes(msg)
        if len(self.messages) >= self.max_messages or self.bytes >= self.max_bytes:
            return self.SEND
        if len(self.messages) == 1:
            self._due = now + self.linger_s
            return self.WAKE
        return self.NONE

    def due(self):
        """When what waits must go (None: nothing waits)."""
        return self._due if self.messages else None

    def take(self) -> Message | None:
        """What waits, as one message (alone: as itself; several: a BATCH), and empty the
        outbox; None if nothing waits. O(messages)."""
        if not self.messages:
            return None
        messages, self.messages, self.bytes, self._due = self.messages, [], 0, None
        if len(messages) == 1:
            return messages[0]
        self.batches += 1
        self.fused += len(messages)
        return pack(messages)

    def clear(self) -> int:
        """Drop what waits (it is sent again some other way); how many were dropped."""
        dropped, self.messages, self.bytes, self._due = len(self.messages), [], 0, None
        return dropped
