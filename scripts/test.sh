#!/usr/bin/env bash
# Lint, build the documentation site (strictly), and run the whole test suite; everything it needs
# is set up first, so this one command passes on a fresh machine: the project's virtual environment
# (created and installed if missing, mkdocs with it) and, for the browser test
# (tests/serve/test_serve_browser.py), Debian's chromium with its chromedriver (installed with apt
# when missing; a machine that has them skips apt altogether).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  echo "Installing chromium and chromium-driver (apt) for the browser test" >&2
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium chromium-driver \
    >/dev/null
fi
source scripts/_venv.sh
ensure_venv

ruff check src tests bench scripts
# The documentation site, strictly: a broken link or anchor in docs/ fails here. It is built into a
# temporary folder (never into the repository) and its log shown only when it fails. (No --quiet:
# it would hide the warnings that --strict counts.)
site="$(mktemp -d)"
if ! log="$(mkdocs build --strict --site-dir "$site" 2>&1)"; then
  echo "$log" >&2
  rm -rf "$site"
  exit 1
fi
rm -rf "$site"
python -m pytest -q "$@"
