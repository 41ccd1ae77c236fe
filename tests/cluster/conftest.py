"""tests/cluster/: tests that start processes, open sockets or make network namespaces (a
module whose tests are all of one process and no sockets lives in tests/unit/)."""
