"""``nbdurable worker --notify-url``: the worker that parks a run posts its signed message."""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import cli_agents as test_agents
from support.notify_receiver import receiver

import nbdurable as nd
from nbdurable.cli import _serve as serve
from nbdurable.cli import _worker as worker
from nbdurable.cli._env import resolve_env

from .conftest import AGENTS

TESTS = Path(__file__).resolve().parents[1]


def _parser(command: str) -> argparse.ArgumentParser:
    commands = argparse.ArgumentParser().add_subparsers(dest="command")
    {"worker": worker, "serve": serve}[command].add_parser(commands)
    parser: argparse.ArgumentParser = commands.choices[command]
    return parser


SECRET = "worker notify secret"


def test_the_notify_flags_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NBDURABLE_NOTIFY_URL", "https://hooks.example/nb")
    monkeypatch.setenv("NBDURABLE_NOTIFY_WITHOUT_LINKS", "yes")
    monkeypatch.setenv("NBDURABLE_PUBLIC_URL", "https://bridge.example")
    for command in ("worker", "serve"):
        args = resolve_env(_parser(command).parse_args(["--store", "m://", "--agents", "m:a"]))
        assert args.notify_url == "https://hooks.example/nb"
        assert args.notify_without_links is True
        assert args.public_url == "https://bridge.example"


async def _submit(url: str) -> str:
    store = nd.open_store(url)
    try:
        runtime = nd.DurableRuntime(store=store, agents=test_agents.agents())
        run = await runtime.submit("janitor", "Clean up stg_2024.")  # the worker executes it
        return run.run_id
    finally:
        store.close()


def test_a_worker_with_notify_url_posts_the_waiting_run(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    run_id = asyncio.run(_submit(url))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    env["NBDURABLE_NOTIFY_SECRET"] = SECRET
    with receiver() as hook:
        command = [
            sys.executable, "-m", "nbdurable.cli", "worker", "--store", url, "--agents", AGENTS,
            "--exit-when-idle", "--poll-interval", "0.02", "--notify-url", hook.url,
            "--public-url", "https://bridge.example",
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr
        # the worker exits once the run waits; closing its runtime waited for the message
        [message] = hook.delivered()
    assert message.genuine(SECRET)
    payload = message.payload
    assert payload["run_id"] == run_id and payload["arguments"] == {"name": "stg_2024"}
    assert payload["link"].startswith(f"https://bridge.example/approve/{run_id}/")
