"""How an env's values travel as JSON: one encoding for both servers and the client.

An env's ``info`` may hold numpy numbers and tuples, its facts are :class:`Fact`
records and its rgb frames numpy arrays; none of them is JSON. The HTTP server
(:mod:`ragen.envs.serving.http_server`) and the OpenEnv server
(:mod:`ragen.envs.serving.openenv_server`) encode them here, and the remote client
(:mod:`ragen.envs.serving.remote`) decodes them here, so the two ends cannot drift:

* any value: :func:`jsonable` (numpy scalars and arrays as numbers and lists, tuples as
  lists, anything else unknown as its ``repr``);
* facts: ``[kind, row, col]``;
* an rgb frame: ``{"shape": [H, W, 3], "data": base64 of its bytes}``.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

from ..facts import Fact

#: the version of ragen's own JSON protocol (``/info`` and ``/reset`` state it)
PROTOCOL_VERSION = 1


def jsonable(value: Any) -> Any:
    """``value`` with numpy scalars/arrays and tuples turned into JSON types; anything
    else unknown becomes its ``repr`` (an env's ``info`` may hold numpy numbers)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)


def facts_to_json(facts: list[Fact]) -> list[list[Any]]:
    return [[f.kind, f.row, f.col] for f in facts]


def facts_from_json(data: Any) -> list[Fact]:
    """The facts of :func:`facts_to_json`; a malformed list raises TypeError/ValueError."""
    return [Fact(str(k), int(r), int(c)) for k, r, c in data]


def frame_to_json(frame: np.ndarray) -> dict[str, Any]:
    frame = np.ascontiguousarray(frame, dtype=np.uint8)
    return {"shape": list(frame.shape), "data": base64.b64encode(frame.tobytes()).decode()}


def frame_from_json(data: Any) -> np.ndarray:
    """The ``(H, W, 3)`` uint8 frame of :func:`frame_to_json` (a writable copy); a
    malformed one raises KeyError/TypeError/ValueError."""
    shape = tuple(int(n) for n in data["shape"])
    pixels = np.frombuffer(base64.b64decode(data["data"]), dtype=np.uint8)
    return pixels.reshape(shape).copy()
