"""``python -m experiments.report [--check]``: rebuild (or check) the docs' generated blocks."""

from __future__ import annotations

import argparse
import sys

from experiments.report import blocks, sources


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m experiments.report",
        description="Rebuild every generated block of README.md, docs/RESULTS.md, "
        "docs/FINDINGS.md and experiments/findings/results.md from the results files.",
    )
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 (with the diff) when a page differs")  # fmt: skip
    args = p.parse_args(argv)
    if args.check:
        stale = blocks.check()
        for d in stale:
            print(d)
        if stale:
            print(f"{len(stale)} page(s) differ from their results files: run "
                  "`python -m experiments.report` and commit the pages", file=sys.stderr)  # fmt: skip
        return 1 if stale else 0
    for page in blocks.PAGES:
        path = sources.ROOT / page
        old = path.read_text()
        new = blocks.rebuild(old)
        if new != old:
            path.write_text(new)
            print(f"rewrote {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
