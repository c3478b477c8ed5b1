"""Packaging: every ``nbdurable*`` package, plus the widgets' front-end files.

The front-end code (ESM and CSS) lives in the top-level ``widgets/`` directory
and ships inside the package as ``nbdurable.notebook.widgets.frontend``, where
``nbdurable.notebook.widgets.assets`` finds it in a wheel; an editable install
reads ``widgets/`` itself. Everything else is configured in ``pyproject.toml``.
"""

from setuptools import find_namespace_packages, setup

FRONTEND = "nbdurable.notebook.widgets.frontend"

setup(
    packages=[*find_namespace_packages(include=["nbdurable*"]), FRONTEND],
    package_dir={FRONTEND: "widgets"},
    package_data={"nbdurable": ["py.typed"], FRONTEND: ["*.js", "*.css"]},
)
