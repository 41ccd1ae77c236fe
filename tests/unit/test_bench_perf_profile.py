"""netstorm.bench.perf_profile: every perf sample lands in one bucket by its stack."""

import pytest
from netstorm.bench.perf_profile import (BUCKETS, bucket, describe,
                                         per_iteration)

K = "([kernel.kallsyms])"


@pytest.mark.parametrize("comm,frames,want", [
    ("ZMQbg/IO/0", [f"tcp_write_xmit {K}", f"tcp_sendmsg_locked {K}", f"tcp_sendmsg {K}",
                    "__send (libc.so.6)"], "TCP send"),
    ("ZMQbg/IO/0", [f"_copy_to_iter {K}", f"tcp_recvmsg_locked {K}", f"tcp_recvmsg {K}"],
     "TCP receive"),
    ("ZMQbg/IO/0", [f"_copy_from_iter {K}", f"unix_stream_sendmsg {K}"], "same-host socket"),
    ("python", [f"clear_page_erms {K}", f"asm_exc_page_fault {K}",
                "__memmove_avx512_unaligned_erms (libc.so.6)"], "page faults"),
    ("python", [f"schedule {K}", f"__x64_sys_poll {K}", "poll (libc.so.6)"],
     "poll and wake-ups"),
    ("ksoftirqd/1", [f"htb_dequeue {K}", f"net_tx_action {K}"], "network softirq"),
    ("python", [f"_raw_spin_unlock_irqrestore {K}", f"handle_softirqs {K}",
                "_PyEval_EvalFrameDefault (libpython3.11.so.1.0)"], "network softirq"),
    ("python", [f"clear_page_erms {K}"], "other kernel"),
    ("swapper", [f"pv_native_safe_halt {K}", f"do_idle {K}"], "idle"),
    ("python", ["_PyEval_EvalFrameDefault (libpython3.11.so.1.0)"], "Python"),
    ("ZMQbg/IO/0", ["crypto_core_salsa20 (libsodium-6c8f8377.so.26.4.0)"], "CURVE"),
    ("python", ["aegis256_soft_encrypt_detached (libsodium-6c8f8377.so.26.4.0)"], "bulk AEAD"),
    ("python", ["netstorm::add_plain<float> (_dataplane.cpython-311-x86_64-linux-gnu.so)"],
     "data plane"),
    ("python", ["FLOAT_add_AVX512F (numpy/core/_multiarray_umath.so)"], "numpy"),
    ("python", ["[unknown] ([unknown])"], "other"),
])
def test_a_sample_goes_to_the_bucket_its_stack_names(comm, frames, want):
    assert bucket(comm, frames) == want and (want in BUCKETS or want == "idle")


def test_shares_become_cpu_seconds_per_iteration():
    seconds = per_iteration({"samples": 4, "shares": {"Python": 0.25, "TCP send": 0.75}}, 8.0)
    assert seconds == {"Python": 2.0, "TCP send": 6.0}
    assert describe(seconds) == "TCP send 6.00, Python 2.00"
