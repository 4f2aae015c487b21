"""A worker process that ends when its parent does (the demo's and the experiments'
process pools)."""

from __future__ import annotations

import os
import threading
import time


def exit_with_parent(parent_pid: int, every_s: float = 0.5) -> None:
    """End this (worker) process soon after its parent dies.

    A parent stopped by Ctrl-C shuts its pool down, but one killed by SIGTERM or SIGKILL
    cannot, and its spawned workers would train on unseen, holding the cores. A daemon
    thread notices the parent is gone (this process gets a new parent) and exits.
    """

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(every_s)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()
