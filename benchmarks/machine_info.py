"""What every benchmark prints first: the machine, the versions, the commit, the load.

Figures mean little without the machine they ran on; each script reports the
same fields (plus the packages it compares) and prints its tables the same way.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sqlite3
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def _first(path: str, prefix: str) -> str | None:
    """The value of the first ``prefix: value`` line of a /proc file, if any."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(prefix):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def version(package: str) -> str | None:
    """The installed version of ``package`` (None when it is not installed)."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def git(*args: str) -> str | None:
    """Output of a git command in the repository holding this script, or None."""
    try:
        done = subprocess.run(
            ["git", *args], cwd=Path(__file__).parent, capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.strip()


def machine(packages: Iterable[str] = ()) -> dict[str, Any]:
    """CPU, cores, RAM, Python, SQLite, ``packages``' versions, commit, load and date."""
    memory = _first("/proc/meminfo", "MemTotal")
    ram = None if memory is None else f"{int(memory.split()[0]) / 1024 / 1024:.1f} GiB"
    return {
        "cpu": _first("/proc/cpuinfo", "model name") or platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "ram": ram,
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "nbdurable": version("nbdurable"),
        **{package: version(package) for package in packages},
        "platform": platform.platform(),
        "commit": git("rev-parse", "--short", "HEAD"),
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "load average": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
    }


def describe(info: dict[str, Any]) -> str:
    """One line: ``key: value, ...``."""
    return ", ".join(f"{key}: {value}" for key, value in info.items())


def table(header: list[str], rows: list[list[str]]) -> str:
    """A plain-text table: the first column left-aligned, the others right-aligned."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = [" | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("-+-".join("-" * w for w in widths))
    for row in rows:
        cells = [str(row[0]).ljust(widths[0])] + [
            str(c).rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        lines.append(" | ".join(cells))
    return "\n".join(lines)
