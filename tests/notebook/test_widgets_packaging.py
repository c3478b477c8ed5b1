"""The widgets' front-end files ship: found in the package and inside a built wheel."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from nbdurable.notebook.widgets import RunWidget
from nbdurable.notebook.widgets._assets import frontend_file

ROOT = Path(__file__).resolve().parents[2]
FILES = [
    "kernel_link.js",
    "verdict_forms.js",
    "theme.css",
    "verdict_forms.css",
    "run_view.js",
    "run_view.css",
    "dashboard_view.js",
    "dashboard_view.css",
]


def test_the_package_serves_its_static_folder() -> None:
    for name in FILES:
        assert frontend_file(name) == ROOT / "nbdurable/notebook/widgets/static" / name
    assert "export default" in str(RunWidget._esm)
    assert "function kernelLink(" in str(RunWidget._esm)  # the shared link comes first
    assert "function editForm(" in str(RunWidget._esm)  # and the Edit and Reply forms
    assert ".nbd-card" in str(RunWidget._css)
    assert "--nbd-fg:" in str(RunWidget._css)  # the shared palette comes first


def test_a_wheel_carries_the_front_end_and_the_installed_package_finds_it(
    tmp_path: Path,
) -> None:
    source = tmp_path / "src"
    source.mkdir()
    for name in ["pyproject.toml", "README.md"]:
        shutil.copy(ROOT / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "nbdurable", source / "nbdurable", ignore=ignore)
    wheels = tmp_path / "wheels"
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels)]
    built = subprocess.run(
        [*pip_wheel, str(source)],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr
    [wheel] = wheels.glob("nbdurable-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for name in FILES:
        assert f"nbdurable/notebook/widgets/static/{name}" in names
    assert "nbdurable/py.typed" in names
    assert not [n for n in names if "__pycache__" in n]

    target = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(target)
    probe = (
        "from nbdurable.notebook.widgets._assets import frontend_file;"
        "print(frontend_file('run_view.js'))"
    )
    found = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
    )
    assert found.returncode == 0, found.stderr
    assert Path(found.stdout.strip()) == target / "nbdurable/notebook/widgets/static/run_view.js"
