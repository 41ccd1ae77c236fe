"""Deployment where clusters live, made from a cluster file: :mod:`.kubernetes` (the
manifests, as data), :mod:`.yaml_text` (their text), :mod:`.cli` (``netstorm-deploy``,
``python -m netstorm.deploy``) and :mod:`.pod` (what runs in a pod besides the scheduler and
the servers). Importing it does nothing."""
