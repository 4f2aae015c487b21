"""How an environment is observed through pictures (VAGEN), without importing torch.

The observation stays a ``str`` (the contract), holding :data:`IMAGE_PLACEHOLDER` where
each picture goes, and the env returns the pictures of the current observation from
``observation_images()`` as ``(H, W, 3)`` uint8 numpy arrays, one per placeholder, in
order (:func:`has_image_observations` tells such an env). The rollout reads both after
every step; the vision chat format (``ragen.agent.visual_context``) turns each
placeholder into the model's own image entry of its chat template and hands the arrays
to the model's processor. A text policy (oracle, random, a chat API) simply ignores the
pictures. Pages and trajectory files carry a picture as PNG (:func:`png_bytes`,
:func:`png_data_uri`).

The built-in visual envs (``sokoban_visual``, ``frozen_lake_visual``) are the grid games
seen as pictures: :mod:`ragen.envs.games.visual_grids`.
"""

from __future__ import annotations

import base64
import io
import struct
import zlib
from typing import Any

import numpy as np

#: where an observation's picture sits in its text (one per image, in order)
IMAGE_PLACEHOLDER = "<image>"


def has_image_observations(env: Any) -> bool:
    """Whether ``env`` observes through pictures (implements ``observation_images``)."""
    return callable(getattr(env, "observation_images", None))


def png_bytes(rgb: np.ndarray) -> bytes:
    """PNG encoding of an HxWx3 uint8 array (Pillow when installed, else plain zlib);
    lossless, so the picture decodes to the same pixels."""
    rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
    try:
        from PIL import Image  # deferred: Pillow is optional (plain zlib below without it)

        buf = io.BytesIO()
        Image.fromarray(rgb, "RGB").save(buf, format="PNG")
        return buf.getvalue()
    except ImportError:
        pass
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def png_data_uri(rgb: np.ndarray) -> str:
    """``data:image/png;base64,...`` of an HxWx3 uint8 array (what a page can show)."""
    return "data:image/png;base64," + base64.b64encode(png_bytes(rgb)).decode("ascii")
