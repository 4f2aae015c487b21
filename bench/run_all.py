"""Run every benchmark in turn (``make bench``); each prints its own table.

.venv/bin/python -m bench.run_all            # the speed benchmarks
.venv/bin/python -m bench.run_all envs gae   # those whose module name contains a word

Without arguments the long learning runs (``LEARNING_RUNS``: tens of minutes each, and
SmolLM2 needs its model file) are left out; name them to run them.
"""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

LEARNING_RUNS = (
    "bench_learning",
    "bench_echo_trap",
    "bench_smollm2",
    "bench_sft_grid",
    "bench_grid_warmstart",
)


def main(argv: list[str]) -> int:
    here = Path(__file__).parent
    names = sorted(
        m.name
        for m in pkgutil.iter_modules([str(here)])
        if m.name.startswith("bench_") or m.name.endswith("_io")
    )
    if argv:
        names = [n for n in names if any(word in n for word in argv)]
    else:
        names = [n for n in names if n not in LEARNING_RUNS]
    failed = []
    for name in names:
        print(f"\n=== bench.{name} ===", flush=True)
        code = subprocess.call([sys.executable, "-m", f"bench.{name}"], cwd=here.parent)
        if code:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    importlib.invalidate_caches()
    sys.exit(main(sys.argv[1:]))
