"""bench_cpu: the tests that start processes or open sockets; the rest, and the helpers
both use, are in tests/unit/test_bench_cpu.py."""

import subprocess
import sys
import time
import psutil
from netstorm.bench.cpu import RoleCpu, role_of


def test_role_of_reads_the_command_line_and_stock_mxnet_roles_from_dmlc_role():
    env = {**__import__("os").environ, "DMLC_ROLE": "server"}
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)",
                               "netstorm.geoserver"]),
             subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]),
             subprocess.Popen([sys.executable, "-c",
                               "import time; time.sleep(30) # import mxnet"], env=env)]
    handles = [psutil.Process(p.pid) for p in procs]
    time.sleep(0.3)         # exec'd: the command line is the child's
    try:
        roles = [role_of(h) for h in handles]
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert roles == ["server", "other", "server"]
    assert role_of(handles[0]) is None       # gone


def test_the_sampler_counts_a_child_that_exits_before_the_end():
    with RoleCpu(period_s=0.05) as cpu:
        child = subprocess.Popen([sys.executable, "-c",
                                  "import time\nt = time.process_time()\n"
                                  "while time.process_time() - t < 0.4: pass",
                                  "netstorm.bench.worker"])
        child.wait()
        time.sleep(0.2)
    s = cpu.summary(1)
    assert s["worker"]["processes"] == 1
    assert s["worker"]["user_s"] + s["worker"]["system_s"] >= 0.3
