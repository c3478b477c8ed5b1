"""The package's front door: __all__, import hygiene, typing marker."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import nbdurable


def test_all_lists_exactly_the_public_names() -> None:
    # subpackages and modules are reachable as attributes but are not API names
    public = {
        n
        for n in dir(nbdurable)
        if not n.startswith("_") and not isinstance(getattr(nbdurable, n), types.ModuleType)
    }
    assert set(nbdurable.__all__) - {"__version__"} == public
    for name in nbdurable.__all__:
        assert hasattr(nbdurable, name), name
    assert len(nbdurable.__all__) == len(set(nbdurable.__all__))


def test_design_contract_names_that_exist_are_exported() -> None:
    contract = [
        "generate_text",
        "stream_chat",
        "resume_from_checkpoint",
        "resume_stream_from_checkpoint",
        "DurableSession",
        "AgentCheckpoint",
        "serialize_checkpoint",
        "deserialize_checkpoint",
        "SessionStore",
        "InMemorySessionStore",
        "open_store",
        "ApprovalSigner",
        "ToolApprovalRequest",
        "ToolApprovalResponse",
        "tool",
        "agent_tool",
        "ScriptedModel",
        "NbdurableError",
        "CheckpointNotFoundError",
        "CheckpointVersionError",
        "RunNotFoundError",
        "DurableConflictError",
        "LimitExceededError",
        "StoreCorruptionError",
    ]
    missing = [name for name in contract if name not in nbdurable.__all__]
    assert missing == []


def test_import_leaves_jupyter_and_pandas_out() -> None:
    # store backends and their drivers load on first use, star import included
    code = (
        "import sys, nbdurable, nbdurable.models, nbdurable.messages\n"
        "from nbdurable import *\n"
        "from nbdurable.models import *\n"
        "mods = ('IPython', 'ipywidgets', 'pandas', 'ipykernel', 'psycopg', 'psycopg_pool',"
        " 'sqlite_utils', 'openai', 'anthropic', 'fastapi', 'starlette', 'uvicorn',"
        " 'temporalio', 'mcp', 'mcp_types', 'langchain_core', 'pydantic_ai', 'anyio',"
        " 'httpx2', 'jsonschema', 'langchain', 'langchain_openai', 'prometheus_client')\n"
        "bad = [m for m in mods if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_metrics_cost_no_import_until_enabled() -> None:
    # a run, the worker's CLI module and the health module load no prometheus_client
    code = (
        "import sys, asyncio, nbdurable as nd, nbdurable.cli._worker, nbdurable.health\n"
        "agent = nd.Agent('a', nd.ScriptedModel(['hi']), version='1')\n"
        "async def main():\n"
        "    rt = await nd.DurableRuntime.open(store=nd.open_store('memory://'), agents=[agent])\n"
        "    run = await rt.submit('a', 'x')\n"
        "    await run.wait()\n"
        "    await rt.close()\n"
        "asyncio.run(main())\n"
        "print('prometheus_client' in sys.modules)\n"
        "import nbdurable.metrics as m; m.enable_metrics()\n"
        "print('prometheus_client' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.split() == ["False", "True"], out.stderr


def test_metrics_without_prometheus_client_name_the_extra() -> None:
    code = (
        "import sys\n"
        "sys.modules['prometheus_client'] = None\n"
        "import nbdurable.metrics as m\n"
        "try:\n"
        "    m.enable_metrics()\n"
        "except nbdurable.ConfigurationError as exc:\n"
        "    print(exc)\n"
    ).replace("import nbdurable.metrics as m", "import nbdurable, nbdurable.metrics as m")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'nbdurable[metrics]'" in out.stdout


def test_framework_adapters_without_their_extras_name_the_extra() -> None:
    # pydantic_ai and langchain_core made unimportable, as on an install without the extras
    code = (
        "import sys\n"
        "sys.modules['pydantic_ai'] = None\n"
        "sys.modules['langchain_core'] = None\n"
        "import nbdurable as nd\n"
        "from nbdurable.models import LangChainModel, PydanticAIModel\n"
        "for make in (lambda: PydanticAIModel('test'), lambda: LangChainModel(object())):\n"
        "    try:\n"
        "        make()\n"
        "    except nd.ConfigurationError as exc:\n"
        "        print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    first, second = out.stdout.strip().splitlines()
    assert "pip install 'nbdurable[pydantic-ai]'" in first
    assert "pip install 'nbdurable[langchain]'" in second


def test_interop_modules_import_no_framework_until_used() -> None:
    # describing an MCP server or importing the adapters loads no SDK
    code = (
        "import sys, nbdurable, nbdurable.mcp, nbdurable.interop._langchain_tools,"
        " nbdurable.interop._pydantic_ai_tools\n"
        "mods = ('mcp', 'mcp_types', 'langchain_core', 'pydantic_ai', 'anyio', 'httpx2')\n"
        "print(','.join(m for m in mods if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_errors_share_one_root() -> None:
    for name in nbdurable.__all__:
        obj = getattr(nbdurable, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, nbdurable.NbdurableError), name
    assert issubclass(nbdurable.ConfigurationError, ValueError)


def test_py_typed_marker_ships() -> None:
    assert (Path(nbdurable.__file__).parent / "py.typed").exists()
