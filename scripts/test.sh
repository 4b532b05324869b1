#!/usr/bin/env bash
# Lint and run the test suite in the project's virtual environment (created if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh
ensure_venv

ruff check src tests bench scripts
python -m pytest -q "$@"
