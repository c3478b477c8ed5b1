#!/bin/bash
# Verify the Binder environment: a fresh virtual environment with exactly
# binder/requirements.txt, nbdurable installed as binder/postBuild installs it,
# then every notebook in notebooks/ executed headless with that environment's kernel.
#
#   bash binder/verify.sh [VENV]        (default VENV: /tmp/binder-venv, recreated)
#
# Needs the package index (pip) and Python 3.11 as `python3.11` or `python3`.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
venv="${1:-/tmp/binder-venv}"
python="$(command -v python3.11 || command -v python3)"
start=$SECONDS

rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q -r "$repo/binder/requirements.txt"
# postBuild runs from the repository root; install from a copy so the checkout stays clean
build="$(mktemp -d)"
trap 'rm -rf "$build"' EXIT
cp -r "$repo/." "$build/"
rm -rf "$build/build" "$build"/*.egg-info
(cd "$build" && PATH="$venv/bin:$PATH" bash binder/postBuild)
"$venv/bin/python" -m pip check
echo "installed in $((SECONDS - start)) s"

"$venv/bin/python" "$repo/binder/execute_notebooks.py" "$repo/notebooks"
echo "binder/verify.sh: every notebook ran in the Binder environment ($((SECONDS - start)) s)"
