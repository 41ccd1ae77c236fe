"""A worker's side of the protocol, as ps-lite's ``Customer``: the client (the API, its I/O
thread and heartbeats; ``client``), its requests waiting for replies and how they fail
(``requests``), one such request (``pending``), its link to its DC's server and the send side
(``link``), small requests fused (``outbox``), its declared keys (``keys``), its shared-memory
slots (``shared_slots``), esync step counts (``steps``), its part in replacing a lost DC
server (``replacement``) and where it finds its cluster (``settings``).

Never imports the server (:mod:`netstorm.geoserver.server`): the two meet only on the wire."""

MAY_IMPORT = ("config", "core", "policy", "compression", "model")
