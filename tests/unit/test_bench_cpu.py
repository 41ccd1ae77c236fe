"""netstorm.bench.cpu: CPU seconds per role over the measured iterations."""

from netstorm.bench.cpu import RoleCpu, cpu_by_role, describe, per_gb


def _series(cpu: RoleCpu, rows):
    """(t, worker user, server system, softirq) rows as the sampler would have kept them."""
    for t, wu, ss, soft in rows:
        cpu.series.append((t, {"worker": [wu, 0.0, 10 * t], "server": [0.0, ss, 0]}, soft,
                           wu + ss + 1.0 * t))


def test_summary_takes_the_samples_around_the_interval_and_divides_by_iterations():
    cpu = RoleCpu()
    _series(cpu, [(0.0, 0.0, 0.0, 0.0), (1.0, 5.0, 1.0, 0.5), (2.0, 7.0, 3.0, 1.5),
                  (3.0, 9.0, 5.0, 2.5), (4.0, 30.0, 6.0, 2.6)])
    s = cpu.summary(2, start=1.2, end=2.9)      # widened to the samples at 1.0 and 3.0
    assert s["worker"]["user_s"] == 2.0 and s["server"]["system_s"] == 2.0
    assert s["softirq_s"] == 1.0 and s["span_s"] == 2.0 and s["worker"]["faults"] == 10
    assert s["total_s"] == 4.0          # processes' seconds; softirq is inside them
    assert s["machine_s"] == 5.0        # and the machine's: the kernel's threads too
    whole = cpu.summary(4)
    assert whole["worker"]["user_s"] == 7.5 and whole["span_s"] == 4.0


def test_cpu_by_role_uses_the_workers_iteration_starts_when_they_are_known():
    cpu = RoleCpu()
    _series(cpu, [(float(t), 2.0 * t, 0.0, 0.0) for t in range(10)])
    steady = cpu_by_role(cpu, {"_iter_start": [0.0, 4.0, 6.0], "_iter_all_s": [4.0, 2.0, 2.0],
                               "model_bytes": 10 ** 9}, 2)
    # iterations 1 and 2: from 4.0 to 8.0 s, 8 CPU-s of worker time
    assert steady["cpu"]["steady_state"] and steady["cpu"]["worker"]["user_s"] == 4.0
    assert steady["cpu_s_per_model_gb"] == 6.0        # machine: 2 + 1 per second
    whole = cpu_by_role(cpu, {"model_bytes": 10 ** 9}, 3)
    assert not whole["cpu"]["steady_state"] and whole["cpu"]["worker"]["user_s"] == 6.0
    assert "worker 4.00 (0.00 sys)" in describe(steady["cpu"])
    assert per_gb({"machine_s": 3.0}, 0) == 0.0
