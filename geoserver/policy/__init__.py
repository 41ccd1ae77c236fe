"""The WAN policy as data, the contract between the scheduler that plans it and the servers
that follow it: trees, policy versions (``tree``), how a tensor is cut into chunks and how a
chunk of a round is named (``chunking``). Pure.

Imports only :mod:`netstorm.geoserver.config`."""

MAY_IMPORT = ("config",)
