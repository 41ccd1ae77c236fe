"""The model's state as data, shared by the servers, the worker library and the launcher:
checkpoint files (``checkpoint``) and the optimizer built from a JSON spec, never a pickle
(``optimizer_host``; it imports MXNet only when used). No sockets.

Imports only :mod:`netstorm.geoserver.config`."""

MAY_IMPORT = ("config",)
