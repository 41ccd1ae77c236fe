"""netstorm.bench.link_sampler: samples at both ends and in between, rates shared."""
import time

import pytest

from netstorm.bench.link_sampler import LinkSampler, read_samples, write_samples


def test_samples_at_entry_exit_and_every_period():
    count = iter(range(1000))
    rates = {("a", "b"): 10.0}
    with LinkSampler(lambda: {("a", "b"): next(count)}, lambda: dict(rates),
                     period_s=0.01) as sampler:
        time.sleep(0.1)
    got = sampler.samples
    assert len(got) >= 4
    assert [c[("a", "b")] for _, c, _ in got] == list(range(len(got)))
    assert all(t0 <= t1 for (t0, _, _), (t1, _, _) in zip(got, got[1:]))
    assert all(r is got[0][2] for _, _, r in got)        # unchanged rates: one dict


def test_a_failed_read_is_counted_not_raised_and_the_period_is_checked():
    def fail():
        raise OSError("gone")
    with LinkSampler(fail, dict, period_s=0.01) as sampler:
        time.sleep(0.03)
    assert sampler.samples == [] and sampler.errors >= 2
    with pytest.raises(ValueError, match="period_s"):
        LinkSampler(dict, dict, period_s=0)


def test_samples_survive_a_round_trip_through_their_file(tmp_path):
    samples = [(1.5, {("a", "b"): 10, ("b", "a"): None}, {("a", "b"): 8.0}),
               (1.6, {("a", "b"): 20, ("b", "a"): 3}, None)]
    write_samples(samples, tmp_path / "s.jsonl")
    assert read_samples(tmp_path / "s.jsonl") == [samples[0], (1.6, samples[1][1], {})]
