"""Image media types, ``data:`` URLs and pictures in tool results, for formats and adapters."""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["ResultImage", "data_url", "parse_data_url", "result_media", "sniff_media_type"]

_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)

_DATA_URL = re.compile(r"^data:(?P<type>[^;,]*)(?P<params>(?:;[^;,]*)*),(?P<data>.*)$", re.DOTALL)


def sniff_media_type(data: bytes, default: str = "image/png") -> str:
    """The image type of ``data`` from its first bytes (PNG, JPEG, GIF, WebP), else ``default``."""
    for magic, media_type in _MAGIC:
        if data.startswith(magic):
            return media_type
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return default


def data_url(data: bytes, media_type: str | None = None) -> str:
    """``data:<type>;base64,<data>``, the type given or sniffed from the bytes."""
    kind = media_type or sniff_media_type(data)
    return f"data:{kind};base64,{base64.b64encode(data).decode('ascii')}"


def parse_data_url(url: str) -> tuple[bytes, str | None] | None:
    """``(bytes, media type)`` of a base64 ``data:`` URL; None for any other URL.

    Raises:
        ValueError: A ``data:`` URL whose payload is not base64.
    """
    match = _DATA_URL.match(url)
    if match is None:
        return None
    if ";base64" not in match["params"]:
        raise ValueError("only base64 data: URLs carry image bytes")
    try:
        data = base64.b64decode(match["data"], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"a data: URL with invalid base64: {exc}") from exc
    return data, match["type"] or None


@dataclass(frozen=True)
class ResultImage:
    """A picture in a tool's result: its base64 data as the tool gave it, and its type."""

    data: str
    media_type: str

    @property
    def url(self) -> str:
        """The picture as a ``data:`` URL."""
        return f"data:{self.media_type};base64,{self.data}"


def result_media(result: Any) -> list[str | ResultImage] | None:
    """A tool result of text and image content blocks (an MCP tool's), in order.

    MCP tools answer with ``{"type": "text", "text"}`` and ``{"type": "image",
    "data", "mimeType"}`` blocks; an adapter whose model takes images sends such a
    result as text and pictures, so the model sees a picture rather than its
    base64 inside JSON text. None: not such a result (no picture, or a block of
    another kind: sent as JSON text, as any other value).
    """
    if not isinstance(result, list) or not result:
        return None
    items: list[str | ResultImage] = []
    for block in result:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            items.append(block["text"])
        elif kind == "image" and isinstance(block.get("data"), str):
            media_type = block.get("mimeType") or block.get("mime_type") or "image/png"
            items.append(ResultImage(block["data"], str(media_type)))
        else:
            return None
    return items if any(isinstance(item, ResultImage) for item in items) else None
