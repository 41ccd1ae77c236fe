"""A DC's server process and everything it shares with the workers and the scheduler, one
folder per job (docs/architecture.md has the map and the layering):

* ``config/``: the cluster file and every setting, as typed data (imports nothing else);
* ``policy/``: the WAN policy as data, the contract with the scheduler;
* ``core/``: the transport: wire format, one declaration per message kind, sockets, roles;
* ``model/``: checkpoints and the optimizer built from its JSON spec;
* ``compression/``: WAN compression codecs and error feedback;
* ``worker/``: a worker's side of the protocol;
* ``server/``: one DC's server, with its WAN side in ``server/wan/``;
* ``cli.py``, ``__main__.py``: the process edge (``python -m netstorm.geoserver``).

Importing this package does nothing: no import hook, no MXNet, no environment read."""
