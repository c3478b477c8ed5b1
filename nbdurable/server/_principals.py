"""Named bearer tokens: who an API request authenticates as.

A token file (``nbdurable serve --token-file PATH``) holds one ``name: token``
line per principal; blank lines and ``#`` comments are ignored. A verdict given
with a named token is recorded as by that name, authenticated. The single
``--token`` (``NBDURABLE_SERVER_TOKEN``) stays one unnamed principal.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Mapping
from pathlib import Path

from .._errors import ConfigurationError

__all__ = ["Principals", "TokenFileError", "read_token_file"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@+-]{0,127}$")


class TokenFileError(ConfigurationError):
    """A token file that cannot be used: unreadable, or a line that is not ``name: token``.

    Attributes:
        path: The file.
        line: The 1-based line number at fault (None: the file as a whole).
    """

    def __init__(self, path: str, message: str, line: int | None = None) -> None:
        self.path = path
        self.line = line
        where = f"{path}, line {line}" if line is not None else path
        super().__init__(f"token file {where}: {message}")


def read_token_file(path: str | Path) -> dict[str, str]:
    """The named tokens of a token file, by name.

    Raises:
        TokenFileError: The file is unreadable or empty, or a line is not
            ``name: token``, a name is invalid or repeated, a token is blank or
            given to two names. The message names the line, never a token.
    """
    shown = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenFileError(shown, f"cannot be read ({type(exc).__name__})") from None
    tokens: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, colon, token = line.partition(":")
        name, token = name.strip(), token.strip()
        if not colon:
            raise TokenFileError(shown, "expected 'name: token'", number)
        if not _NAME.match(name):
            raise TokenFileError(
                shown,
                f"{name!r} is not a valid name (letters, digits and _ . @ + -)",
                number,
            )
        if not token or any(c.isspace() for c in token):
            raise TokenFileError(shown, f"the token of {name!r} is blank or has spaces", number)
        if name in tokens:
            raise TokenFileError(shown, f"{name!r} appears twice", number)
        if token in tokens.values():
            raise TokenFileError(shown, f"the token of {name!r} is another name's too", number)
        tokens[name] = token
    if not tokens:
        raise TokenFileError(shown, "names no principal (lines are 'name: token')")
    return tokens


class Principals:
    """The bearer tokens a bridge accepts: named ones, and at most one unnamed.

    Args:
        token: The unnamed token (None: none).
        named: Name -> token.

    Raises:
        ConfigurationError: The unnamed token is also a named one's.
    """

    def __init__(self, token: str | None, named: Mapping[str, str] | None = None) -> None:
        self._named = [(name, value.encode("utf-8")) for name, value in (named or {}).items()]
        self._unnamed = token.encode("utf-8") if token is not None else None
        if self._unnamed is not None and any(v == self._unnamed for _, v in self._named):
            raise ConfigurationError("the server token is also a named token of the token file")

    @property
    def configured(self) -> bool:
        """Whether any token is configured (else only loopback clients are answered)."""
        return self._unnamed is not None or bool(self._named)

    def identify(self, credential: str) -> tuple[bool, str | None]:
        """``(known, name)`` of a presented token; ``name`` None for the unnamed one.

        Every configured token is compared in constant time, whichever matches.
        """
        presented = credential.encode("utf-8")
        found: tuple[bool, str | None] = (False, None)
        if self._unnamed is not None and hmac.compare_digest(presented, self._unnamed):
            found = (True, None)
        for name, value in self._named:
            if hmac.compare_digest(presented, value):
                found = (True, name)
        return found
