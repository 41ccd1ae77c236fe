"""The side-by-side benchmark (``scripts/bench.py``): :mod:`.systems` (what runs),
:mod:`.worker` (each worker process), :mod:`.measure` (what is collected), :mod:`.awareness`
(estimates and policies against the emulator's truth), :mod:`.report` (table and plots),
:mod:`.cli` (the command line)."""
