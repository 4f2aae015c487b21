"""Speed and scale benchmarks: run each as `.venv/bin/python -m bench.NAME` from the
repository root, or all of them with `make bench` (`bench.run_all`). Research studies are
under `experiments/`."""
