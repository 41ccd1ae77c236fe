"""fuzz: the tests that start processes or open sockets; the rest, and the helpers
both use, are in tests/unit/test_fuzz.py."""

import re
import time

import pytest
from fuzz_messages import generate
from live_cluster import Cluster

from unit.test_fuzz import (
    BATCH,
    FINAL_ROUNDS,
    RSS_LIMIT,
    SEED,
    SUSPECT_BATCHES,
    fuzz,
    output_of,
    pinpoint,
)


@pytest.fixture(scope="module")
def messages():
    return generate(SEED)



def first_failure(run) -> str:
    """The process the launcher saw fail first (it stops the others)."""
    for line in run.lines("launch"):
        match = re.match(r"\[launch\] (.+?) (exited with code|was killed by)", line)
        if match:
            return match.group(1)
    return ""



@pytest.mark.slow
@pytest.mark.parametrize("dataplane", ["native", "python"])
def test_fuzz_a_live_cluster_keeps_every_process_up_and_every_sum_exact(messages,
                                                                        no_leftovers,
                                                                        dataplane):
    """On both data paths: the compiled one recognises chunks and hands everything else to
    the Python path, whose validation the fuzzer exercises."""
    started = time.monotonic()
    cluster = Cluster(no_leftovers, dataplane)
    problems, rss, sent = [], {}, []
    measured = [n for n in cluster.procs if not n.startswith("worker")]
    try:
        before = {n: cluster.procs[n].memory_info().rss for n in measured}
        rounds_before = cluster.rounds()
        sent = fuzz(cluster, list(cluster.targets), messages, BATCH, 0.02)
        if not cluster.dead():
            time.sleep(1.0)
            rss = {n: (before[n], cluster.procs[n].memory_info().rss) for n in measured}
            if cluster.rounds() <= rounds_before:
                problems.append(f"hang: no round trained while fuzzing (stuck at round "
                                f"{rounds_before})")
            cluster.stop_after(FINAL_ROUNDS)
    except BaseException:
        cluster.kill()
        raise
    finally:
        run = cluster.join()
    assert sum(f"data plane: {dataplane}" in line for line in run.lines("server")) == 2
    for name, (b, a) in rss.items():
        growth = a / b - 1
        print(f"RSS {name}: {b / 2**20:.1f} -> {a / 2**20:.1f} MiB ({100 * growth:+.1f}%)")
        if growth >= RSS_LIMIT:
            problems.append(f"RSS of {name} grew {100 * growth:.1f}% while fuzzing "
                            f"({b / 2**20:.1f} -> {a / 2**20:.1f} MiB)")
    if run.code != 0:
        culprit = first_failure(run) or "worker dc0/0"
        window = sent[-SUSPECT_BATCHES:]
        where = "; ".join(f"[{b[0].category}] {', '.join(sorted({m.kind for m in b}))}"
                          for b in window)
        problems.append(f"crash: {culprit} failed (cluster exit {run.code}) after "
                        f"{sum(map(len, sent))} of {len(messages)} messages; the last "
                        f"{len(window)} batches: {where}\n{output_of(run, culprit)}")
        if sent:
            problems.append(f"{culprit}: " + pinpoint(no_leftovers, culprit,
                                                      [m for b in window for m in b]))
    finished = [line for line in run.lines("worker") if "every sum exact" in line]
    if len(finished) != 2:
        wrong = [line for line in run.output.splitlines() if "want" in line]
        problems.append(f"training did not finish with exact sums: {finished + wrong}")
    print(f"{len(messages)} messages x {len(cluster.targets)} targets, "
          f"{time.monotonic() - started:.1f}s in all")
    assert not problems, f"seed {SEED} (output in {no_leftovers}/**/cluster.log):\n" + \
        "\n\n".join(problems)
