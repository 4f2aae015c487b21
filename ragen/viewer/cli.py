"""``ragen view RUN_DIR [--out DIR] [--serve [PORT]]``"""

from __future__ import annotations

import argparse
import errno
import functools
import http.server
import sys
import time
from pathlib import Path

from ragen.cli_utils import check_out_dir, write_error
from ragen.errors import RagenError, UsageError

from .site import build_site


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "view",
        help="build a static HTML site of a run (curves, steps, trajectories) and open/serve it",
        description=(
            "Build a self-contained HTML site from a run folder: a `ragen train` run, a "
            "`ragen eval` output, or a folder of runs (runs/demo). It works offline from "
            "file://. Example: ragen view runs/sokoban-starpo-s --serve"
        ),
    )
    p.add_argument("run_dir", help="the run folder")
    p.add_argument("--out", default=None, help="where to write the site (default: RUN_DIR/site)")
    p.add_argument(
        "--serve",
        nargs="?",
        type=int,
        const=8000,
        default=None,
        metavar="PORT",
        help="serve the site on http://127.0.0.1:PORT (standard library server) until Ctrl-C "
        "(0: any free port)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    skipped: list[str] = []

    def skip(line: str) -> None:
        skipped.append(line)
        print(f"ragen view: skipped {line}", file=sys.stderr)

    tic = time.perf_counter()
    out = Path(args.out) if args.out else Path(args.run_dir) / "site"
    if args.out or Path(args.run_dir).is_dir():  # (a missing run folder: build_site says so)
        check_out_dir(out)  # read-only or full: one line before anything is read
    try:
        index = build_site(args.run_dir, args.out, on_skip=skip)
    except OSError as err:
        if isinstance(err, RagenError):  # a missing run folder, said by the loader
            raise
        raise write_error(err, out, "the site") from None  # the disk filled while writing
    note = f"; skipped {len(skipped)} damaged part(s), listed above" if skipped else ""
    print(
        f"wrote {index} in {time.perf_counter() - tic:.1f}s{note} (open it in a browser: "
        f"file://{index.resolve()})"
    )
    if args.serve is not None:
        serve(index.parent, args.serve)
    return 0


def serve(folder: Path, port: int) -> None:
    """Serve ``folder`` over HTTP on localhost until interrupted (port 0: any free one,
    named on the line it prints)."""
    if not 0 <= port <= 65535:
        raise UsageError(
            f"--serve {port} is not a TCP port. Fix: --serve 8000, or 0 (any free one)"
        )
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError as err:
        if err.errno != errno.EADDRINUSE:
            raise
        raise UsageError(
            f"port {port} is already in use (another `ragen view --serve`?). Fix: --serve "
            "with another port, or --serve 0 for any free one"
        ) from None
    with server:
        print(
            f"serving {folder} at http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C stops)",
            flush=True,  # a script reading our output learns the port at once
        )
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            print("stopped")
