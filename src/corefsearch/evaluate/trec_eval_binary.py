"""The trec_eval binary that Pyserini ships inside its Anserini jar, for checking a run with
trec_eval itself (what ``python -m pyserini.eval.trec_eval`` runs) without a separate install."""

from __future__ import annotations

import importlib.util
import platform
import zipfile
from pathlib import Path

# The binaries in Anserini's jar, by (system, machine).
BINARIES = {("Linux", "x86_64"): "trec_eval-linux-amd64", ("Linux", "i686"): "trec_eval-linux-i386",
            ("Darwin", "arm64"): "trec_eval-macosx-aarch64", ("Darwin", "x86_64"): "trec_eval-macosx-x86_64"}


def extract_trec_eval(folder: Path) -> Path | None:
    """Copy this machine's trec_eval out of Pyserini's Anserini jar into ``folder``; None where the
    jar holds none for this machine (or Pyserini is not installed)."""
    name = BINARIES.get((platform.system(), platform.machine()))
    spec = importlib.util.find_spec("pyserini")
    if name is None or spec is None or not spec.submodule_search_locations:
        return None
    jars = sorted((Path(spec.submodule_search_locations[0]) / "resources" / "jars").glob("*.jar"))
    if not jars:
        return None
    target = Path(folder) / name
    with zipfile.ZipFile(jars[0]) as jar:
        target.write_bytes(jar.read(f"trec_eval/{name}"))
    target.chmod(0o755)
    return target
