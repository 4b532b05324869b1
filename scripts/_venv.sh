# Sourced by scripts/demo.sh and scripts/test.sh: create the project's virtual environment
# (.venv, or $COREFSEARCH_VENV) and install the package with its test extras into it, once
# per version of pyproject.toml.
ensure_venv() {
  local venv="${COREFSEARCH_VENV:-.venv}"
  local python="${PYTHON:-python3}"
  local stamp="$venv/.corefsearch-installed"
  local want
  want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
  if [ ! -x "$venv/bin/python" ]; then
    echo "Creating the virtual environment $venv" >&2
    "$python" -m venv "$venv"
  fi
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "Installing corefsearch and its dependencies into $venv (a few minutes the first time)" >&2
    # torch is pinned to a CPU build in pyproject.toml, so no CUDA packages are pulled.
    # (Some machines' pip configuration names local package folders that may not exist;
    # pip's warnings about them are noise here.)
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[test]" \
      2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
    echo "$want" > "$stamp"
  fi
  export PATH="$PWD/$venv/bin:$PATH"
  export VIRTUAL_ENV="$PWD/$venv"
}
