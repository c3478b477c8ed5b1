"""The JSONL store: one append-only, greppable file per run.

Its private modules: ``_store`` (the class) and ``_format`` (the file format:
lines, the format file and its version).
"""

from ._format import FORMAT_VERSION
from ._store import JsonlSessionStore

__all__ = ["FORMAT_VERSION", "JsonlSessionStore"]
