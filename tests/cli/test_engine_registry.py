"""Every ``--engine`` of the command line asks one registry: ``nbdurable/cli/_engines.py``."""

from __future__ import annotations

import argparse

import pytest

from nbdurable import _extras
from nbdurable.cli import _parser, main
from nbdurable.cli._engines import ENGINES
from nbdurable.runs import EMBEDDED, RESTATE, TEMPORAL

from .conftest import AGENTS


def _choices(argv: list[str]) -> list[str]:
    """The choices of ``--engine`` in the subcommand ``argv`` names."""
    parser: argparse.ArgumentParser = _parser()
    for name in argv:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    engine = next(a for a in parser._actions if "--engine" in a.option_strings)
    return list(engine.choices or ())


def test_the_registry_names_every_engine_a_run_may_record() -> None:
    assert list(ENGINES) == [EMBEDDED, TEMPORAL, RESTATE]
    assert {name: entry.extra for name, entry in ENGINES.items()} == {
        EMBEDDED: None,
        TEMPORAL: "temporal",
        RESTATE: "restate",
    }


def test_worker_demo_and_move_take_their_engines_from_the_registry() -> None:
    assert _choices(["worker"]) == list(ENGINES)
    assert _choices(["runs", "move"]) == list(ENGINES)
    with_demo = [name for name, entry in ENGINES.items() if entry.demo is not None]
    assert _choices(["demo"]) == with_demo == [EMBEDDED, RESTATE]


def test_each_engine_brings_its_own_worker_options() -> None:
    args = _parser().parse_args(
        ["worker", "--store", "memory://", "--agents", AGENTS, "--engine", "temporal"]
    )
    assert (args.address, args.task_queue, args.namespace) == (
        "127.0.0.1:7233",
        "nbdurable",
        "default",
    )
    assert (args.ingress, args.admin) == ("http://127.0.0.1:8080", "http://127.0.0.1:9070")


@pytest.mark.parametrize("engine", [TEMPORAL, RESTATE])
def test_an_engine_whose_extra_is_missing_stops_with_the_install_line(
    engine: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(_extras.EXTRA_MODULES, engine, ("nbdurable_no_such_module",))
    argv = ["worker", "--store", "memory://", "--agents", AGENTS, "--engine", engine]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"nbdurable worker --engine {engine} needs the {engine} extra" in err
    assert f"pip install 'nbdurable[{engine}]'" in err
