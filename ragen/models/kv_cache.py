"""The K/V cache keyword of a transformers forward, as the installed version names it.

transformers 5.24 renamed the forward's ``past_key_values`` to ``cache`` (the old name
warns on every call and is removed in 5.40); older releases know only the old name, and
a keyword a forward does not know vanishes into its ``**kwargs`` without a word, which
would silently drop the cache. So the name is read from the forward's own signature,
once per model class.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

NEW, OLD = "cache", "past_key_values"


@functools.cache
def _declared(cls: type) -> str | None:
    """The cache keyword ``cls.forward`` declares (None: neither)."""
    params = inspect.signature(cls.forward).parameters
    return NEW if NEW in params else OLD if OLD in params else None


def cache_keyword(module: Any) -> str:
    """``"cache"`` or ``"past_key_values"``: what ``module``'s forward takes. A wrapper
    that declares neither (PEFT's) is asked for its base model's."""
    name = _declared(type(module))
    if name is None and hasattr(module, "get_base_model"):
        name = _declared(type(module.get_base_model()))
    return name or OLD


def cache_arg(module: Any, cache: Any) -> dict[str, Any]:
    """``{keyword: cache}`` to splat into ``module(...)``."""
    return {cache_keyword(module): cache}


def returned_cache(output: Any) -> Any:
    """The cache a forward returned (``output.cache``, or ``past_key_values`` before
    5.24)."""
    value = getattr(output, NEW, None)
    return value if value is not None else getattr(output, OLD)
