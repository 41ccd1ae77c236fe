"""Coverage-guided fuzzing of the compiled data plane's input handling with libFuzzer: the
chunk recogniser (geoserver/native/recognise.cpp, harness tests/fuzz/recognise_fuzzer.cpp)
and the bulk channel's opener (BulkOpener::open in geoserver/native/bulk_aead.cpp, harness
tests/fuzz/bulk_open_fuzzer.cpp), built with clang under ASan and UBSan, each run for a
bounded time from seeds made of valid messages. A crash, a sanitizer report or a broken
promise of the harness fails the test with libFuzzer's output.

clang comes from Debian's packages (tests/conftest.py: without clang++ these tests skip,
naming the opt-in that makes scripts/test.sh install it). Run separately: ``FUZZ_SECONDS``
(default 10) sets each fuzzer's time.
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import fuzz_messages        # tests/fuzz_messages.py
import pytest

from netstorm.geoserver.core import security, wire
from netstorm.geoserver.core.wire import HEADER, MAGIC, PROTOCOL_VERSION, Flag, Kind

REPO = Path(__file__).resolve().parents[2]
NATIVE = REPO / "geoserver" / "native"
HARNESSES = REPO / "tests" / "fuzz"
FLAGS = ["-std=c++17", "-g", "-O1", "-fsanitize=fuzzer,address,undefined",
         "-fno-sanitize-recover=undefined", f"-I{NATIVE}"]
SECONDS = int(os.environ.get("FUZZ_SECONDS", "10"))
# ASan's quarantine would hold 256 MiB of freed buffers; the harnesses keep no pointers
ENV = {"ASAN_OPTIONS": "quarantine_size_mb=32:detect_leaks=1",
       "UBSAN_OPTIONS": "print_stacktrace=1"}
BULK_KEY, BULK_LINK = bytes(range(32)), (0, 1, 3)     # as in bulk_open_fuzzer.cpp


pytestmark = pytest.mark.system_package("clang")       # tests/conftest.py


@pytest.fixture(scope="module")
def clang() -> str:
    """clang++ (Debian's clang: the module's system_package mark skips without it)."""
    return shutil.which("clang++")


def build(clang: str, out: Path, sources: list, defines=()) -> Path:
    """``sources`` compiled and linked with libFuzzer and the sanitizers into ``out``."""
    command = [clang, *FLAGS, *defines, *map(str, sources), "-ldl", "-o", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stderr[-4000:]}"
    return out


def fuzz(binary: Path, workdir: Path, seeds: list, extra_env=None, options=()) -> dict:
    """Run ``binary`` for :data:`SECONDS` from ``seeds`` (bytes); assert it ended cleanly;
    its final stats and output."""
    corpus, seed_dir = workdir / "corpus", workdir / "seeds"
    corpus.mkdir()
    seed_dir.mkdir()
    for i, seed in enumerate(seeds):
        (seed_dir / f"seed{i:05d}").write_bytes(seed)
    # a single allocation over 1 GiB by the code under test is a finding (malloc limit); the
    # process's resident size is not: under a full suite it started at 1.3 GiB once (ASan's
    # shadow and quarantine on a loaded machine), so it is bounded at 4 GiB only
    command = [str(binary), f"-max_total_time={SECONDS}", "-rss_limit_mb=4096",
               "-malloc_limit_mb=1024", "-timeout=10",
               "-print_final_stats=1", f"-artifact_prefix={workdir}/", *options,
               str(corpus), str(seed_dir)]
    env = dict(os.environ, **ENV, **(extra_env or {}))
    done = subprocess.run(command, capture_output=True, text=True, env=env,
                          timeout=SECONDS + 120, check=False)
    output = done.stdout + done.stderr
    crashes = sorted(p.name for p in workdir.iterdir() if p.name.startswith(
        ("crash-", "leak-", "timeout-", "oom-")))
    assert done.returncode == 0 and not crashes and "SUMMARY:" not in output, \
        f"{binary.name} found a problem (exit {done.returncode}, artifacts {crashes}, " \
        f"in {workdir}):\n{output[-6000:]}"
    stats = {m[1]: int(m[2]) for m in re.finditer(r"stat::(\w+):\s+(\d+)", output)}
    stats["corpus"] = len(list(corpus.iterdir()))
    stats["cov"], stats["ft"] = map(int, re.findall(r"cov: (\d+) ft: (\d+)", output)[-1])
    stats["output"] = output
    print(f"{binary.name}: {stats['number_of_executed_units']} runs, "
          f"{stats['average_exec_per_sec']}/s, corpus {stats['corpus']} files, "
          f"coverage {stats['cov']} edges ({stats['ft']} features), "
          f"peak RSS {stats['peak_rss_mb']} MB")
    return stats


# ---------------------------------------------------------------- recognise()

def recognise_input(frames: list, user: str | None, curve: bool) -> bytes:
    """One message (frames without the routing id) in recognise_fuzzer.cpp's layout."""
    user_bytes = (user or "").encode()[:255]
    head = frames[0] if frames else b""
    meta = len(frames[1]) if len(frames) > 1 else 0
    payload = len(frames[2]) if len(frames) > 2 else 0
    config = int(curve) | min(len(frames), 7) << 1 | (user is not None) << 4
    return struct.pack("<BHIB", config, min(meta, 0xFFFF), min(payload, 0xFFFFFFFF),
                       len(user_bytes)) + user_bytes + head


def recognise_seeds() -> list:
    """Valid chunks from dc1's and dc2's servers (with and without CURVE, every dtype,
    both kinds, QUEUED or not), and the fuzz corpus of tests/fuzz_messages.py."""
    seeds = []
    for sender, dc in ((2, "dc1"), (11, "dc2")):
        for kind in (Kind.CHUNK_UP, Kind.CHUNK_DOWN):
            for code, dtype in wire.DTYPES.items():
                if dtype is None:
                    continue
                for flags in (0, Flag.QUEUED):
                    head = HEADER.pack(MAGIC, PROTOCOL_VERSION, int(kind), sender, int(flags),
                                       code, 1, 7, 42, 3, 1 << 33, 9)
                    frames = [head, b"", bytes(dtype.itemsize * 64)]
                    seeds.append(recognise_input(frames, security.user_id(dc).decode(), True))
                    seeds.append(recognise_input(frames, None, False))
    for one in fuzz_messages.generate(0)[::7]:
        seeds.append(recognise_input(list(one.frames), "dc:dc1", True))
    return seeds


def test_recognise_fuzzer(clang, tmp_path):
    """recognise() under ASan/UBSan: no crash, and every accepted input keeps the promises
    of recognise.hpp (checked in the harness); the valid seeds reach the fast path."""
    # chunk_wire.cpp's sum kernels ask __builtin_cpu_supports("f16c"), which clang before
    # 16 does not know; the recogniser never sums, so the portable kernel stands in here
    binary = build(clang, tmp_path / "recognise_fuzzer",
                   [HARNESSES / "recognise_fuzzer.cpp", NATIVE / "recognise.cpp",
                    NATIVE / "chunk_wire.cpp", NATIVE / "zmq_api.cpp",
                    NATIVE / "loaded_library.cpp"],
                   defines=["-D__builtin_cpu_supports(feature)=false"])
    stats = fuzz(binary, tmp_path, recognise_seeds(), options=["-use_value_profile=1"])
    accepted, inputs = map(int, re.search(r"accepted (\d+) of (\d+) inputs",
                                          stats["output"]).groups())
    print(f"recognise_fuzzer: {accepted} of {inputs} inputs took the fast path")
    assert accepted > 0 and inputs > 10000, stats["output"][-2000:]


# ---------------------------------------------------------------- BulkOpener::open

def bulk_core_source(out: Path) -> Path:
    """bulk_aead.cpp without its Python bindings (the part from the "Python bindings"
    banner on, and the pybind11 include): the cipher and the opener, unchanged."""
    lines = (NATIVE / "bulk_aead.cpp").read_text().splitlines(keepends=True)
    cut = next((i for i, line in enumerate(lines) if "Python bindings" in line), None)
    assert cut is not None, "bulk_aead.cpp has no 'Python bindings' banner to cut at"
    kept = [line for line in lines[:cut] if "pybind11" not in line]
    out.write_text("".join(kept) + "}  // namespace netstorm\n")
    return out


def libsodium_path() -> str | None:
    """pyzmq's bundled libsodium (site-packages/pyzmq.libs/libsodium-*.so*), or the one
    this process loaded with zmq."""
    import zmq
    site = Path(zmq.__file__).resolve().parents[1]
    found = sorted(glob.glob(str(site / "pyzmq.libs" / "libsodium-*.so*")))
    if found:
        return found[0]
    with open("/proc/self/maps") as maps:
        for line in maps:
            if "libsodium" in line:
                return line.split()[-1]
    return None


def bulk_seeds() -> list:
    """Operations in bulk_open_fuzzer.cpp's layout: sealing and opening chunks (header and
    payload as the server seals them), frames sealed here under the harness's key (valid,
    counters 1, 2, ...), replays, corruptions and counters."""
    dataplane = pytest.importorskip("netstorm.geoserver._dataplane")
    head = HEADER.pack(MAGIC, PROTOCOL_VERSION, int(Kind.CHUNK_UP), 2, 0, 1, 0, 1, 42, 3, 5, 0)
    plain = [head + bytes(64), head + bytes(range(256)) * 4, b"", b"x"]
    seeds = []
    for text in plain:
        sealed = struct.pack("<BH", 1, len(text)) + text + struct.pack("<HB", 0, 0)
        seeds += [sealed, sealed + b"\x02", sealed.replace(b"\x01", b"\x05", 1) + b"\x06",
                  sealed[:-1] + b"\x01"]                  # corrupt the counter's first byte
    sealer = dataplane.BulkSealer(BULK_KEY, *BULK_LINK)
    frames = [sealer.seal(text) for text in plain]
    raw = b"".join(struct.pack("<BH", 0, len(f)) + f for f in frames)
    seeds += [raw, raw + struct.pack("<BH", 4, len(frames[0])) + frames[0],
              struct.pack("<BH", 3, 40) + struct.pack("<Q", 7), struct.pack("<BH", 0, 39),
              struct.pack("<BH", 3, 0xFFFF) + struct.pack("<Q", (1 << 64) - 1)]
    return seeds


def test_bulk_open_fuzzer(clang, tmp_path):
    """BulkOpener::open under ASan/UBSan with a fixed key: no crash, and the opener keeps
    its promises (checked in the harness: no state change on a refusal, no plaintext left
    on a bad tag, a sealed frame opens to its plaintext once)."""
    sodium = libsodium_path()
    if sodium is None:
        pytest.skip("this pyzmq has no libsodium (a system libzmq without CURVE?): no bulk "
                    "channel to fuzz")
    binary = build(clang, tmp_path / "bulk_open_fuzzer",
                   [HARNESSES / "bulk_open_fuzzer.cpp",
                    bulk_core_source(tmp_path / "bulk_aead_core.cpp"),
                    NATIVE / "loaded_library.cpp"])
    stats = fuzz(binary, tmp_path, bulk_seeds(), extra_env={"NETSTORM_LIBSODIUM": sodium})
    opened = re.search(r"bulk_open_fuzzer: opened(.*)", stats["output"])[1]
    counts = {name: int(n) for name, n in re.findall(r"(\w+) (\d+)", opened)}
    print(f"bulk_open_fuzzer: opens by status {counts}")
    assert counts["ok"] > 0 and counts["forged"] > 0 and counts["replay"] > 0 and \
        counts["short"] > 0, counts
