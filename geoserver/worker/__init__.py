"""A worker's side of the protocol, as ps-lite's ``Customer``: the client (requests and
replies, heartbeats, timeouts; ``client``), one request waiting for its reply (``pending``),
small requests fused (``outbox``), its shared-memory slots (``shared_slots``), its part in
replacing a lost DC server (``replacement``) and where it finds its cluster (``settings``).

Never imports the server (:mod:`netstorm.geoserver.server`): the two meet only on the wire."""

MAY_IMPORT = ("config", "core", "policy", "compression", "model")
