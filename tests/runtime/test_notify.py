"""Notifications: a signed webhook message when a run starts waiting on a human.

Against a real receiver on 127.0.0.1: the message's HMAC and fields, links
only with a public URL, a receiver that fails first (retried, delivered once)
or always (the run goes on, the log says so), and exactly one message per
approval when several processes write the same waiting state.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from support.gated_janitor import gated as gated_on
from support.gated_janitor import parked
from support.notify_receiver import receiver

import nbdurable as nd
from nbdurable.durable._signer import token_matches
from nbdurable.runs import RunPatch
from nbdurable.runtime import Agent, DurableRuntime, Notifier, verify_notification

from .conftest import eventually


def gated(ran: list[str]) -> Agent:
    """The janitor, its one gated call dropping ``stg_2023``."""
    return gated_on(ran, "stg_2023")


SECRET = "the receiver's shared notify secret"
CLAIMER = Path(__file__).resolve().parents[1] / "support" / "notify_claimer.py"


async def test_a_waiting_run_posts_one_signed_message_with_its_fields(store: Any) -> None:
    ran: list[str] = []
    with receiver() as hook:
        notifier = Notifier(hook.url, secret=SECRET)
        async with await DurableRuntime.open(
            store=store, agents=[gated(ran)], notify=notifier
        ) as rt:
            run, request = await parked(rt)
            await eventually(lambda: len(hook.all()) >= 1, timeout=30)
            notifier.drain(timeout=30)
            [message] = hook.all()
            assert message.genuine(SECRET)
            assert not message.genuine("another secret")
            headers = message.headers
            assert verify_notification(
                SECRET,
                headers["x-nbdurable-timestamp"],
                message.body,
                headers["x-nbdurable-signature"],
            )
            assert not verify_notification(
                SECRET, headers["x-nbdurable-timestamp"], message.body + b" ", "sha256=00"
            )
            assert headers["x-nbdurable-delivery"] == f"{run.run_id}/{request.approval_id}"
            payload = message.payload
            assert payload["event"] == "waiting_approval"
            assert payload["run_id"] == run.run_id and payload["agent"] == "janitor"
            assert payload["tool"] == "drop_table"
            assert payload["arguments"] == {"name": "stg_2023"}
            assert payload["approval_id"] == request.approval_id
            assert payload["approvers"] is None
            assert "link" not in payload  # no public URL: no link
            assert run.run_id in payload["text"] and "drop_table" in payload["text"]
            assert "stg_2023" in payload["text"]
            # no secret travels: neither the approval secret nor the notify one
            assert rt.signer._key.decode() not in message.body.decode()
            assert SECRET not in message.body.decode()
            assert rt.runtime_store.rt_get(run.run_id).notified == [request.approval_id]
            await run.approve(request.approval_id)
            assert (await run.result()).text == "done"
        assert len(hook.all()) == 1  # the verdict and the end send nothing
    assert ran == ["stg_2023"]


async def test_with_a_public_url_the_message_carries_a_working_signed_link(
    store: Any,
) -> None:
    ran: list[str] = []
    with receiver() as hook:
        notifier = Notifier(hook.url, secret=SECRET, public_url="https://bridge.example/nb/")
        async with await DurableRuntime.open(
            store=store, agents=[gated(ran)], notify=notifier
        ) as rt:
            run, request = await parked(rt)
            await eventually(lambda: len(hook.delivered()) >= 1, timeout=30)
            [message] = hook.delivered()
            link = message.payload["link"]
            assert link in message.payload["text"]
            parts = urlsplit(link)
            assert f"{parts.scheme}://{parts.netloc}" == "https://bridge.example"
            assert parts.path == f"/nb/approve/{run.run_id}/{request.approval_id}"
            [token] = parse_qs(parts.query)["token"]
            assert token_matches(
                rt.signer, token, request, run_id=run.run_id, max_age_ms=rt.approval_max_age_ms
            )
            await run.approve(request.approval_id, token=token)
            assert (await run.result()).text == "done"
    assert ran == ["stg_2023"]
    without = Notifier(
        "http://127.0.0.1:9/x", secret=SECRET, public_url="https://b", include_links=False
    )
    assert not without.links


async def test_a_failing_receiver_is_retried_and_gets_the_message_once(store: Any) -> None:
    ran: list[str] = []
    with receiver(script=[500, 503]) as hook:
        notifier = Notifier(hook.url, secret=SECRET, backoff=0.05)
        async with await DurableRuntime.open(
            store=store, agents=[gated(ran)], notify=notifier
        ) as rt:
            run, request = await parked(rt)
            assert notifier.drain(timeout=60)
            assert [r.status for r in hook.all()] == [500, 503, 200]
            assert len(hook.delivered()) == 1
            # the same message each time (a retry, not a new notification)
            assert len({r.body for r in hook.all()}) == 1
            assert all(r.genuine(SECRET) for r in hook.all())
            await run.approve(request.approval_id)
            assert (await run.result()).text == "done"


async def test_a_receiver_that_always_fails_never_stops_the_run(
    store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[str] = []
    caplog.set_level(logging.INFO, logger="nbdurable.notify")
    with receiver(script=[500] * 10) as hook:
        notifier = Notifier(hook.url, secret=SECRET, attempts=3, backoff=0.01)
        async with await DurableRuntime.open(
            store=store, agents=[gated(ran)], notify=notifier
        ) as rt:
            run, request = await parked(rt)
            await run.approve(request.approval_id)
            assert (await run.result()).text == "done"
            assert notifier.drain(timeout=60)
        assert [r.status for r in hook.all()] == [500, 500, 500]
    assert ran == ["stg_2023"]
    failed = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any(
        run.run_id in m and "failed after 3 attempts: HTTP 500" in m and "not affected" in m
        for m in failed
    ), failed


async def test_an_unreachable_receiver_times_out_and_is_logged(
    store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # a listening socket that never answers: each attempt ends at the timeout
    caplog.set_level(logging.INFO, logger="nbdurable.notify")
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/hook"
        notifier = Notifier(url, secret=SECRET, attempts=2, timeout=0.3, backoff=0.01)
        async with await DurableRuntime.open(
            store=store, agents=[gated([])], notify=notifier
        ) as rt:
            started = time.monotonic()
            await parked(rt)
            assert time.monotonic() - started < 5  # the loop never waited on the receiver
            assert notifier.drain(timeout=30)
    finally:
        silent.close()
    assert any("failed after 2 attempts" in r.getMessage() for r in caplog.records)


async def test_two_runtimes_on_one_store_send_one_message(store: Any, reopen: Any) -> None:
    ran: list[str] = []
    with receiver() as hook:
        first = Notifier(hook.url, secret=SECRET)
        second = Notifier(hook.url, secret=SECRET)
        async with (
            await DurableRuntime.open(store=store, agents=[gated(ran)], notify=first) as one,
            await DurableRuntime.open(
                store=reopen(store), agents=[gated(ran)], notify=second
            ) as two,
        ):
            run, request = await parked(one)
            # the leg's end written again by the other runtime (as a Temporal
            # local activity re-run does): the message is not sent again
            two.set_state(run.run_id, RunPatch(state="waiting_approval"))
            one.set_state(run.run_id, RunPatch(state="waiting_approval"))
            assert first.drain(timeout=30) and second.drain(timeout=30)
            assert len(hook.all()) == 1
            await run.approve(request.approval_id)
            assert (await run.result()).text == "done"


def test_bad_notifier_options_are_configuration_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NBDURABLE_NOTIFY_SECRET", raising=False)
    with pytest.raises(nd.ConfigurationError, match="NBDURABLE_NOTIFY_SECRET"):
        Notifier("http://127.0.0.1:9/hook")
    for url in ("ftp://host/x", "hook", "http:///nohost"):
        with pytest.raises(nd.ConfigurationError):
            Notifier(url, secret=SECRET)
    with pytest.raises(nd.ConfigurationError, match="attempts"):
        Notifier("http://127.0.0.1:9/hook", secret=SECRET, attempts=0)
    with pytest.raises(nd.ConfigurationError, match="notify must be a Notifier"):
        DurableRuntime(store=nd.open_store("memory://"), notify="http://x")  # type: ignore[arg-type]
    monkeypatch.setenv("NBDURABLE_NOTIFY_SECRET", SECRET)
    notifier = Notifier("http://127.0.0.1:9/hook")
    assert SECRET not in repr(notifier)


async def _park_without_notifier(store: Any) -> tuple[nd.runtime.Run, nd.ToolApprovalRequest]:
    async with await DurableRuntime.open(store=store, agents=[gated([])]) as rt:
        return await parked(rt)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_processes_racing_on_one_waiting_run_send_one_message(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = (
        str(request.getfixturevalue("pg_database"))
        if kind == "postgres"
        else f"sqlite:///{tmp_path}/runs.db"
    )
    store = nd.open_store(url)
    try:
        run, request_ = asyncio.run(_park_without_notifier(store))
        with receiver() as hook:
            root = str(CLAIMER.parents[2])  # the checkout under test, not an installed copy
            path = os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])
            env = {**os.environ, "NBDURABLE_NOTIFY_SECRET": SECRET, "PYTHONPATH": path}
            start_at = time.time() + 3.0
            procs = [
                subprocess.Popen(
                    [sys.executable, str(CLAIMER), url, run.run_id, hook.url, str(start_at)],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for _ in range(4)
            ]
            for proc in procs:
                out, err = proc.communicate(timeout=120)
                assert proc.returncode == 0, err
                assert "done" in out
            assert len(hook.all()) == 1
            [message] = hook.all()
            assert message.genuine(SECRET)
            assert message.payload["approval_id"] == request_.approval_id
        assert store.rt_get(run.run_id).notified == [request_.approval_id]
    finally:
        store.close()


async def test_a_run_needing_attention_posts_one_message_with_the_reason(store: Any) -> None:
    with receiver() as hook:
        notifier = Notifier(hook.url, secret=SECRET)
        async with await DurableRuntime.open(
            store=store, agents=[gated([])], notify=notifier
        ) as rt:
            run, _ = await parked(rt)
            # the waiting state's hook runs just after the record shows it
            await eventually(lambda: len(hook.all()) == 1, timeout=30)
            reason = "a manual tool was interrupted: decide whether to run it again"
            rt.set_state(run.run_id, RunPatch(state="needs_attention", reason=reason))
            rt.set_state(
                run.run_id, RunPatch(state="needs_attention", reason=reason)
            )  # written again
            assert notifier.drain(timeout=30)
            messages = [r.payload for r in hook.all()]
            assert [m["event"] for m in messages] == ["waiting_approval", "needs_attention"]
            attention = messages[1]
            assert attention["run_id"] == run.run_id and attention["reason"] == reason
            assert reason in attention["text"] and "tool" not in attention
            assert all(r.genuine(SECRET) for r in hook.all())
