"""shared_slots: the tests that start processes or open sockets; the rest, and the helpers
both use, are in tests/unit/test_shared_slots.py."""

import os
import subprocess
import sys
import numpy as np
from launching import launch, worker_cmd
from netstorm.geoserver.core.shared_memory import segment_bytes
from netstorm.geoserver.server.shared_segments import SharedSegments
from unit.test_shared_slots import SIZE
from unit.test_shared_slots import slots  # noqa: F401  (fixtures)

W1, W2 = 11, 12



def test_what_the_server_refuses_to_map(slots, tmp_path):
    server = SharedSegments()
    me = os.getpid()
    assert "not connected over" in server.attach(W1, 7, 0, slots.fd, SIZE, np.float32)
    assert "not a descriptor" in server.attach(W1, 7, me, -1, SIZE, np.float32)
    assert "not a descriptor" in server.attach(W1, 7, me, "3", SIZE, np.float32)
    assert "smaller than" in server.attach(W1, 7, me, slots.fd, 10, np.float32)
    # another size than the key needs, a pipe, a gone process
    assert "is not a segment" in server.attach(W1, 7, me, slots.fd, SIZE + 4096, np.float32)
    read, write = os.pipe()
    try:
        assert "is not a memfd" in server.attach(W1, 7, me, read, SIZE, np.float32)
    finally:
        os.close(read)
        os.close(write)
    plain = tmp_path / "segment"
    plain.write_bytes(bytes(segment_bytes(SIZE, np.float32)))     # right size, not a memfd
    with open(plain, "r+b") as f:
        assert "is not a memfd" in server.attach(W1, 7, me, f.fileno(), SIZE, np.float32)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    assert "cannot open" in server.attach(W1, 7, int(gone.stdout), slots.fd, SIZE,
                                          np.float32)
    assert not server.has(W1, 7)


def test_a_cluster_on_one_host_moves_large_keys_through_shared_memory(no_leftovers):
    """2 DCs x 2 workers: exact sums; of each worker's 20 pushes of the large key, the 5
    made while its slot still held an unapplied round go by frame, the rest (and every
    value it reads) through shared memory; the small key never."""
    run = launch(["--dcs", 2, "--workers-per-dc", 2], worker_cmd("shared_worker.py"),
                 no_leftovers)
    assert run.code == 0, run.output[-5000:]
    for rank in range(4):
        assert f"worker {rank}: shared keys [0]; key 0: 15 pushes and 16 values shared" \
            in run.output, run.output[-5000:]
        assert f"worker {rank} all checks passed" in run.output
    assert "FAILED" not in run.output and "goes by frames" not in run.output
