"""Minting approval links needs no web framework: nbdurable.server imports FastAPI lazily."""

from __future__ import annotations

import subprocess
import sys


def test_approval_link_imports_no_web_framework() -> None:
    code = (
        "import sys\n"
        "from nbdurable.server import approval_link, link_for, ApprovalTokenError\n"
        "print(','.join(m for m in ('fastapi', 'starlette', 'uvicorn') if m in sys.modules))\n"
        "from nbdurable.server import create_app\n"
        "print('fastapi' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True"]  # nothing before create_app; FastAPI after it
