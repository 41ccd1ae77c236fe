"""The records of a DC's :class:`~netstorm.geoserver.server.local_store.KeyStore`: one
:class:`KeyEntry` per key and one :class:`Round` per round in flight, and the
:class:`RequestError` a worker's request is refused with.

Pure data, shared by the store and its collaborators (the sync modes of
:mod:`~netstorm.geoserver.server.sync_modes`, the replica side of
:mod:`~netstorm.geoserver.server.store_replicas`), which all read and write them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["KeyEntry", "RequestError", "Round"]


class RequestError(ValueError):
    """A worker request that cannot be served; the text is sent back to the worker."""


@dataclass
class Round:
    local: object = None
    pushed: set = field(default_factory=set)
    layout: list = field(default_factory=list)   # [(start, stop, tree)] once sent to the WAN
    total: object = None
    chunks_done: int = 0
    local_only: bool = False    # hfa: a round that does not cross the WAN, complete once
                                # every local worker pushed
    owned: bool = False         # ``local`` is this store's array (else a received frame)
    prepared: bool = False      # quorum rounds: ``local`` is this DC's contribution as is

    @property
    def complete(self) -> bool:
        """Every chunk's global sum is back (a round not yet sent to the WAN is not)."""
        return self.local_only or bool(self.layout) and self.chunks_done == len(self.layout)


@dataclass
class KeyEntry:
    key: int
    dtype: np.dtype
    shape: tuple
    value: object = None
    base: object = None         # hfa/esync: the value after the latest WAN round
    init_gen: int = 0
    applied: int = 0
    rounds: dict = field(default_factory=dict)
    pulls: list = field(default_factory=list)   # (worker, request, min_round, shared)
    inits: list = field(default_factory=list)   # (worker, request, generation)
    next_push: dict = field(default_factory=dict)
    sparse: bool = False        # row_sparse gradients: the optimizer updates their rows only
    kept: object = None         # the Round applied last, kept for a replica audit's repair
                                # to sum it again (docs/recovery-audit.md)
    size: int = field(init=False)   # elements

    def __post_init__(self):
        self.size = int(np.prod(self.shape, dtype=np.int64))
