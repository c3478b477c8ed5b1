"""Write the checklist's ids, one a line with its behaviour, for tests/spec_ids.txt.

Usage (from the repository root)::

    python tests/support/spec_ids.py PATH/TO/SEED-CHECKLIST.md --output tests/spec_ids.txt

An id is a checklist line ``- **S000-17** behaviour...``. An id listed twice (the
checklist's sections on where nbdurable differs repeat some) is written once,
where it first appears. Without ``--output`` the list goes to standard output.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ITEM = re.compile(r"^- \*\*(S\d{3}-\d{2})\*\*\s+(.*)$")
ID = re.compile(r"^S\d{3}-\d{2}$")


def spec_ids(checklist: str) -> dict[str, str]:
    """The checklist's ids in order, each with the first line of its behaviour."""
    found: dict[str, str] = {}
    for line in checklist.splitlines():
        match = ITEM.match(line.strip())
        if match and match.group(1) not in found:
            found[match.group(1)] = match.group(2).strip()
    return found


def render(ids: dict[str, str]) -> str:
    """The text of spec_ids.txt: ``<id> <behaviour>`` lines."""
    return "".join(f"{key} {text}\n" for key, text in ids.items())


def read_list(text: str) -> list[str]:
    """The ids of a spec_ids.txt text (the first word of each non-blank line)."""
    ids = [line.split(maxsplit=1)[0] for line in text.splitlines() if line.strip()]
    bad = [key for key in ids if not ID.match(key)]
    if bad:
        raise ValueError(f"not checklist ids: {bad}")
    return ids


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checklist", type=Path, help="path of SEED-CHECKLIST.md")
    parser.add_argument("--output", type=Path, help="write here instead of standard output")
    args = parser.parse_args(argv)
    ids = spec_ids(args.checklist.read_text(encoding="utf-8"))
    if not ids:
        parser.error(f"no '- **S000-01** ...' lines in {args.checklist}")
    text = render(ids)
    if args.output:
        args.output.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
