"""scripts/wan_link_cost.py: one shaped link's transfer and the machine's CPU over it.

Needs root and ``ip netns`` (skipped otherwise); about 2 s.
"""
import importlib.util
import re
import subprocess
import sys

import pytest
from launching import REPO, needs_wan
from netstorm.wan.shaping import gso_bytes

SCRIPT = str(REPO / "scripts" / "wan_link_cost.py")
# 40 Mbit/s: one MTU-sized packet at a time stays within one loaded core's reach (the suite
# runs in three processes; at 100 Mbit/s it once measured 54% of the rate)
MBPS = 40
LINE = re.compile(rf"^5 MB at {MBPS} Mbit/s, offload packets <= (\d+) B: ([\d.]+) s "
                  r"\((\d+) Mbit/s\), machine busy ([\d.]+) CPU-s, of it softirq ([\d.]+)$")


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                          timeout=60)


@needs_wan
@pytest.mark.alone
def test_one_transfer_at_the_link_rate_with_and_without_offload():
    for extra, gso in (((), gso_bytes(MBPS)), (("--gso", "1500"), 1500)):
        done = run("--mbps", str(MBPS), "--mbytes", "5", *extra)
        assert done.returncode == 0, done.stderr
        match = LINE.match(done.stdout.strip())
        assert match, done.stdout
        assert int(match[1]) == gso
        assert 0.7 * MBPS <= int(match[3]) <= MBPS      # htb: ~96% goodput of the rate
        assert float(match[4]) >= float(match[5]) >= 0


def test_bad_arguments_are_refused_before_anything_runs():
    for args, message in ((("--gso", "100"), "--gso must be in 1500..65536"),
                          (("--mbps", "0"), "must be > 0")):
        done = run(*args)
        assert done.returncode == 2 and message in done.stderr, done.stderr


@needs_wan
def test_a_failed_sender_is_named_and_nothing_is_left_running(capsys):
    spec = importlib.util.spec_from_file_location("wan_link_cost", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    marker = "wan-link-cost-test-receiver"
    script.FLOW = script.FLOW.replace(
        "else:\n    conn = socket.create_connection",
        "else:\n    sys.exit(3)\n    conn = socket.create_connection") + f"\n# {marker}\n"
    assert "sys.exit(3)" in script.FLOW
    assert script.main(["--mbps", "10", "--mbytes", "1"]) == 1
    assert "the sender in dc0 failed (exit 3)" in capsys.readouterr().err
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    assert left.returncode == 1, left.stdout          # pgrep: nothing matched
