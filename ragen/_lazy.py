"""Lazy package attributes (PEP 562), so ``import ragen.x`` stays cheap.

    __getattr__, __dir__, __all__ = lazy_exports(__name__, globals(), {"load_policy": "loading"})

makes ``ragen.x.load_policy`` import ``ragen.x.loading`` on first access.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(
    package: str, namespace: dict[str, Any], exports: dict[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``(__getattr__, __dir__, __all__)`` for ``package``; ``exports``: name -> submodule."""
    names = sorted(exports)

    def __getattr__(name: str) -> Any:
        if name in exports:
            module = importlib.import_module(f"{package}.{exports[name]}")
            return getattr(module, name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__, names
