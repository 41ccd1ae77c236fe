"""WAN compression along the trees: the wire form of a compressed chunk (``payload``), the
lossy steps (``codecs``), one codec class per type and the table naming them
(``registry``) and per-hop error feedback shared by every type (``feedback``); its setting is
:mod:`netstorm.geoserver.config.compression`. See docs/compression.md.

Never imports the worker or the server: both use it."""

__all__ = ["MAY_IMPORT"]

MAY_IMPORT = ("config", "core", "policy")
