"""One DC's server: its wiring and dispatch (``geoserver``), the local store of its keys
and workers (``local_store``, its records ``store_keys``), the exchange along the trees
(``aggregation``), the sync modes (the store's strategies ``sync_modes``, ``round_gate``,
``mixed_sync``, ``esync``), recovery from a peer's replica (``recovery``, ``replica``,
``store_replicas``), its side of shared memory (``shared_segments``) and its WAN side
(``wan``).

Never imports the worker (:mod:`netstorm.geoserver.worker`): the two meet only on the wire."""

__all__ = ["MAY_IMPORT"]

MAY_IMPORT = ("config", "core", "policy", "compression", "model")
