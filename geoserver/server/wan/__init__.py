"""A DC server's WAN side, between servers only: how chunks leave (``send_queue``,
``routing``: queues, splits, detours) and arrive (``reassembly``), the passive measurement of
every inbound link (``link_monitor``) and the start-up probe (``probe``); ``transport`` ties
them together. See docs/awareness.md.

Part of :mod:`netstorm.geoserver.server`, whose rules it follows; it never imports the rest of
the server (the exchange hands it whole chunks)."""

MAY_IMPORT = ("config", "core", "policy", "compression")
