"""``make bench`` runs every benchmark at its small size: each must say how (a benchmark
without QUICK arguments made ``bench.run_all`` refuse to start)."""

from bench.run_all import QUICK, benchmarks


def test_every_benchmark_has_quick_arguments():
    names = benchmarks()
    assert "bench_rl_step" in names and "trainer_checkpoint_io" in names
    assert sorted(set(names) - set(QUICK)) == []
    assert sorted(set(QUICK) - set(names)) == []  # no arguments for a benchmark gone
