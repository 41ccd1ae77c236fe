"""What the replica audit costs a DC server (docs/recovery-audit.md), per key size.

    python scripts/replica_digest_cost.py [--sizes-mib 1 16 64] [--repeat 5]

For a float32 key of each size: the server's optimizer step on it (SGD with momentum, what
a round already costs the server's loop), the SHA-256 digest of it (on the hashing thread),
and what the loop itself pays per audited key (submitting the hash and reading the update
count). Medians of ``--repeat`` runs; one process, no sockets.
"""
import argparse
import statistics
import time

import numpy as np

from netstorm.geoserver.config.sync import SyncConfig
from netstorm.geoserver.model.checkpoint import digest
from netstorm.geoserver.model.optimizer_host import OptimizerHost, optimizer_spec
from netstorm.geoserver.server.replica_digest import ReplicaDigests
from netstorm.geoserver.server.store_keys import KeyEntry


def _median_s(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mib", type=float, nargs="+", default=[1, 16, 64])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--every", type=int, default=10, help="audit_every to amortize over")
    args = parser.parse_args()
    import mxnet as mx
    host = OptimizerHost(optimizer_spec(mx.optimizer.create("sgd", learning_rate=0.1,
                                                            momentum=0.9)))
    print(f"{'key MiB':>8} {'optimizer step ms':>18} {'SHA-256 ms':>11} {'GB/s':>6} "
          f"{'loop us':>8} {'share at every=' + str(args.every):>18}")
    for key, mib in enumerate(args.sizes_mib):
        n = int(mib * (1 << 20)) // 4
        value, grad = np.random.rand(n).astype(np.float32), np.random.rand(n).astype(
            np.float32)
        step = _median_s(lambda: host.update(key, grad, value), args.repeat)
        hashed = _median_s(lambda: digest(value), args.repeat)
        digests = ReplicaDigests(1, SyncConfig())
        entry = KeyEntry(key, value.dtype, value.shape, value=value, applied=1)
        loop = _median_s(lambda: digests.applied(entry, host), args.repeat)
        digests.close(wait=True)        # the thread done before the next size
        share = hashed / (args.every * step)
        print(f"{mib:>8g} {step * 1e3:>18.2f} {hashed * 1e3:>11.2f} "
              f"{n * 4 / hashed / 1e9:>6.2f} {loop * 1e6:>8.0f} {share:>17.1%}")


if __name__ == "__main__":
    main()
