"""store_bench.py's report: the main table, step times per decile, ratios and targets."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from store_bench_cold import ColdLoad

if TYPE_CHECKING:
    from store_bench import Figures

NO_STORE = "no store"
NBDURABLE = "nbdurable sqlite"
LG_SYNC = "langgraph sync"
DBOS = "dbos sqlite"
PARALLEL = 4  # tool calls per step of the parallel-tool workload
NBDURABLE_PAR = f"nbdurable sqlite, {PARALLEL} tools"
LG_SYNC_PAR = f"langgraph sync, {PARALLEL} tools"


def fmt_bytes(value: int | None) -> str:
    if value is None:
        return "-"
    if value >= 1024 * 1024:
        return f"{value / (1024 * 1024):.1f} MB"
    if value >= 1024:
        return f"{value / 1024:.0f} KB"
    return f"{value} B"


def fmt_ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if value < 1 else f"{value:.1f}" if value < 1000 else f"{value:,.0f}"


def table(rows: list[Figures]) -> str:
    head = (
        "config",
        "N",
        "total ms",
        "ms/step first 10",
        "ms/step last 10",
        "last/first",
        "bytes on disk",
        "after close",
        "bytes/msg",
        "checkpoints",
        "history ms",
        "load latest ms",
    )
    body = []
    for f in rows:
        per_message = f.bytes_closed / f.messages if f.bytes_closed else None
        body.append(
            (
                f.config,
                f"{f.n:,}",
                fmt_ms(f.total_s * 1000),
                fmt_ms(f.first10_ms),
                fmt_ms(f.last10_ms),
                f"{f.ratio:.2f}",
                fmt_bytes(f.bytes_on_disk),
                fmt_bytes(f.bytes_closed),
                f"{per_message:,.0f}" if per_message else "-",
                str(f.checkpoints) if f.checkpoints is not None else "-",
                fmt_ms(f.history_ms),
                fmt_ms(f.load_ms),
            )
        )
    widths = [max(len(r[i]) for r in (head, *body)) for i in range(len(head))]
    lines = []
    for r in (head, *body):
        cells = [
            c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        lines.append(" | ".join(cells))
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def bytes_per_message(rows: list[Figures]) -> str:
    """nbdurable's bytes per message at each N, and per message added between Ns."""
    ours = sorted((f for f in rows if f.config == NBDURABLE and f.bytes_closed), key=lambda f: f.n)
    parts = [f"N={f.n:,}: {f.bytes_closed / f.messages:,.0f}" for f in ours if f.bytes_closed]
    for a, b in itertools.pairwise(ours):
        if a.bytes_closed and b.bytes_closed:
            added = (b.bytes_closed - a.bytes_closed) / (b.messages - a.messages)
            parts.append(f"added {a.n:,}->{b.n:,}: {added:,.0f}")
    return "; ".join(parts)


def decile_table(rows: list[Figures], min_n: int = 500) -> str:
    """Median ms/step of each tenth of every run of at least ``min_n`` steps."""
    long = [f for f in rows if f.n >= min_n and f.deciles()]
    if not long:
        return ""
    head = ("config", "N", *(f"d{d + 1}" for d in range(10)), "d10/d1")
    body = [
        (f.config, f"{f.n:,}", *(fmt_ms(v) for v in f.deciles()), f"{f.decile_ratio:.2f}")
        for f in long
    ]
    widths = [max(len(r[i]) for r in (head, *body)) for i in range(len(head))]
    lines = []
    for r in (head, *body):
        cells = zip(r, widths, strict=True)
        lines.append(" | ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(cells)))
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def ratios(rows: list[Figures], n: int = 500) -> list[str]:
    """Every comparison at N = ``n`` as a ratio (those whose configurations ran)."""
    by = {(f.config, f.n): f for f in rows}
    ours = by.get((NBDURABLE, n))
    if ours is None:
        return []
    found = []
    for other in (NO_STORE, LG_SYNC, "langgraph default", DBOS):
        f = by.get((other, n))
        if f is None:
            continue
        found.append(f"total, {NBDURABLE} / {other}: {ours.total_s / f.total_s:.3f}")
        if f.bytes_closed and ours.bytes_closed:
            share = ours.bytes_closed / f.bytes_closed
            found.append(f"bytes after close, {NBDURABLE} / {other}: {share:.4f}")
    par, lg_par = by.get((NBDURABLE_PAR, n)), by.get((LG_SYNC_PAR, n))
    if par is not None and lg_par is not None and par.bytes_on_disk and lg_par.bytes_on_disk:
        found.append(f"total, {NBDURABLE_PAR} / {LG_SYNC_PAR}: {par.total_s / lg_par.total_s:.3f}")
        share = par.bytes_on_disk / lg_par.bytes_on_disk
        found.append(f"bytes on disk, {NBDURABLE_PAR} / {LG_SYNC_PAR}: {share:.4f}")
        if par.bytes_closed and lg_par.bytes_closed:
            share = par.bytes_closed / lg_par.bytes_closed
            found.append(f"bytes after close, {NBDURABLE_PAR} / {LG_SYNC_PAR}: {share:.4f}")
    return found


@dataclass
class Target:
    name: str
    value: str
    limit: str
    passed: bool


def targets(rows: list[Figures], cold: ColdLoad | None, n: int = 500) -> list[Target]:
    """The issue's goals (those whose configurations ran), each a ratio from this run."""
    by = {(f.config, f.n): f for f in rows}
    ours = by.get((NBDURABLE, n))
    found: list[Target] = []

    def check(name: str, value: float, limit: float, note: str = "") -> None:
        shown = f"{value:.4f}" if value < 0.1 else f"{value:.2f}"
        found.append(Target(name, shown + note, f"<= {limit}", value <= limit))

    if ours is not None:
        if (bare := by.get((NO_STORE, n))) is not None:
            check(f"N={n} total / no store", ours.total_s / bare.total_s, 2.5)
        for other in (LG_SYNC, DBOS):
            if (f := by.get((other, n))) is not None:
                share = ours.total_s / f.total_s
                check(f"N={n} total / {other}", share, 0.1, f" ({1 / share:.0f}x faster)")
        if (f := by.get((DBOS, n))) is not None and ours.bytes_closed and f.bytes_closed:
            check(f"N={n} bytes after close / {DBOS}", ours.bytes_closed / f.bytes_closed, 1.0)
        # The bytes goals are "after close": an open store's write-ahead
        # log (up to 8 MB while a run writes) is emptied when the run ends.
        if (f := by.get((LG_SYNC, n))) is not None and ours.bytes_closed and f.bytes_closed:
            check(f"N={n} bytes after close / {LG_SYNC}", ours.bytes_closed / f.bytes_closed, 0.01)
    par, lg_par = by.get((NBDURABLE_PAR, n)), by.get((LG_SYNC_PAR, n))
    if par is not None and lg_par is not None and par.bytes_closed and lg_par.bytes_closed:
        check(f"N={n} bytes after close, {PARALLEL} tools / {LG_SYNC_PAR}",
              par.bytes_closed / lg_par.bytes_closed, 0.01)  # fmt: skip
    for f in rows:
        if f.config in (NBDURABLE, NO_STORE) and f.n >= 5000 and f.deciles():
            limit = 1.2 if f.n <= 5000 else 1.3
            check(f"{f.config} N={f.n:,} ms/step last decile / first", f.decile_ratio, limit)
    if cold is not None:
        check(f"cold load of {cold.messages:,} messages / floor", cold.ratio, 2.0)
    return found
