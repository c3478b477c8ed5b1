"""A client learns of a run's end when its workflow closes, not at its next poll of a SQLite
store that a worker process wrote: ``result()`` returns within a fraction of the poll's
one-second cap after the worker wrote the run's end."""

from __future__ import annotations

import asyncio
import time

from .conftest import Cluster


async def test_result_returns_soon_after_the_worker_wrote_the_end(cluster: Cluster) -> None:
    # ~2.05 s of run: half-way between two polls 1 s apart (backoff), were the end missed
    cluster.worker(slow=1.95)
    async with cluster.runtime() as rt:
        run = await rt.submit("crashy", "Do the three steps.")
        result = await asyncio.wait_for(run.result(), 60)
        noticed = time.time() * 1000
    assert result.text == "All three steps done."
    late = noticed - cluster.store.rt_get(run.run_id).updated_at
    assert late < 300, f"result() returned {late:.0f} ms after the run ended"
