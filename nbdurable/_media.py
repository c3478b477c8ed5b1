"""Image media types and ``data:`` URLs, shared by the message formats and the adapters."""

from __future__ import annotations

import base64
import binascii
import re

__all__ = ["data_url", "parse_data_url", "sniff_media_type"]

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
