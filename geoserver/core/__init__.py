"""The transport, as ps-lite's ``Van`` and ``Postoffice``: the wire format (``wire``), the
one declaration per message kind (``kinds``: code, schema, who may send it to whom), each
kind's schema (``schema``), roles, ZeroMQ sockets with CURVE and ZAP (``van``,
``security``), fused messages (``batch``), the node table (``nodes``), registration and
admission of every message (``postoffice``), and the shared-memory layout a worker and its
server agree on (``shared_memory``).

Imports nothing above it: only :mod:`netstorm.geoserver.config` and :mod:`.policy`."""

MAY_IMPORT = ("config", "policy")
