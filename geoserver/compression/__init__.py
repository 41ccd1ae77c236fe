"""WAN compression along the trees: the wire form of a compressed chunk (``payload``), the
lossy steps (``codecs``) and per-hop error feedback (``feedback``); its setting is
:mod:`netstorm.geoserver.config.compression`. See docs/compression.md.

Never imports the worker or the server: both use it."""

MAY_IMPORT = ("config", "core", "policy")
