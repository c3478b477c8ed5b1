"""Notifications on the Temporal engine: the worker whose activity writes the waiting
state posts the signed message, once, with two workers on the queue."""

from __future__ import annotations

import asyncio

from support.notify_receiver import receiver

from .conftest import Cluster

SECRET = "temporal notify secret"


async def test_temporal_workers_post_one_message_per_approval(cluster: Cluster) -> None:
    with receiver() as hook:
        for _ in range(2):
            cluster.worker(
                args=["--notify-url", hook.url, "--public-url", "https://bridge.example"],
                NBDURABLE_NOTIFY_SECRET=SECRET,
            )
        async with cluster.runtime(heartbeat_timeout=2) as rt:
            run = await rt.submit("janitor", "Clean up stale staging tables.")
            await asyncio.wait_for(run.wait("waiting_approval"), 60)
            (request,) = await run.pending_approvals()
            for _ in range(600):
                if hook.delivered():
                    break
                await asyncio.sleep(0.05)
            [message] = hook.delivered()
            assert message.genuine(SECRET)
            payload = message.payload
            assert payload["run_id"] == run.run_id
            assert payload["approval_id"] == request.approval_id
            assert payload["tool"] == "drop_table"
            assert payload["link"].startswith(f"https://bridge.example/approve/{run.run_id}/")
            await run.approve()
            result = await asyncio.wait_for(run.result(), 60)
            assert result.text == "Done: dropped stg_2023."
        await asyncio.sleep(1.0)  # a late duplicate would have arrived by now
        assert len(hook.all()) == 1
