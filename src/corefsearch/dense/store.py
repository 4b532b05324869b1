"""The dense index as its readers see it: the layout on disk, its manifest, and the encoder it names.

Apart from the code that writes the index (:mod:`corefsearch.dense.indexing`: encoding, shards,
merging, building FAISS), so that a searcher, ``corefsearch add``, the retriever stage and the Ray
driver read an index without importing how one is built.

Layout, beside the Lucene index in the same INDEX directory::

    INDEX/dense/faiss.index           the FAISS index (inner product), row r = line r of ids.txt
    INDEX/dense/ids.txt               one passage id per line, in passages.jsonl order
    INDEX/dense/index, INDEX/dense/docid   hard links to faiss.index and ids.txt: the names
                                      Pyserini's FaissSearcher reads (no extra disk)
    INDEX/dense/manifest.json         encoder (reference, passage fingerprint, config, dimension),
                                      passages_sha256, count, FAISS type and parameters, timings, versions
    INDEX/dense.partial/              an encoding in progress (chunks/NNNNN.npy + NNNNN.ids.txt)
    INDEX/dense-shards/shard-I-of-N/  one shard: vectors.npy, ids.txt, manifest.json (no FAISS index)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from corefsearch.base.artefacts import DENSE_INDEX, read_manifest
from corefsearch.base.errors import MissingArtefactError
from corefsearch.base.models import check_model_folder, resolve_device
from corefsearch.base.onnx_backend import check_backend_device, resolve_backend
from corefsearch.base.shipped import resolve_reference
from corefsearch.datasets.dataset import check_built_from
from corefsearch.dense.model import BiEncoder

if TYPE_CHECKING:
    from corefsearch.dense.model import BiEncoder

DENSE_DIR = "dense"
SHARDS_DIR = "dense-shards"
FAISS_FILE = "faiss.index"
IDS_FILE = "ids.txt"
PYSERINI_INDEX_FILE = "index"  # the same file as faiss.index (hard link), for Pyserini's FaissSearcher
PYSERINI_DOCID_FILE = "docid"  # the same file as ids.txt (hard link)
VECTORS_FILE = "vectors.npy"
MANIFEST = "manifest.json"


def shard_name(shard: tuple[int, int]) -> str:
    """The folder of shard ``(I, N)`` in ``INDEX/dense-shards``."""
    return f"shard-{shard[0]}-of-{shard[1]}"


def portable_reference(reference: str) -> str:
    """An encoder reference that still works from another directory: a folder (a shipped model's name: its
    folder) becomes absolute."""
    if reference in ("", "default"):
        return "default"
    path = Path(resolve_reference(reference))
    return str(path.resolve()) if path.exists() else reference


def load_encoder(encoder: str | BiEncoder | None, device: str = "auto", backend: str | None = None,
                 sides: tuple[str, ...] = ("query", "passage"), threads: int | None = None) -> BiEncoder:
    """A retriever from a folder, a Hugging Face name or ``default``; an instance passes through.
    ``backend`` ``onnx`` or ``onnx-int8``: the encoders of ``sides`` run with ONNX Runtime on the CPU
    (``BiEncoder.use_backend``; an instance is switched in place); None: torch, or onnx-int8 for an
    inference-only folder (``model.backend`` says which ran)."""
    check_backend_device(backend, device)
    if isinstance(encoder, BiEncoder):
        model = encoder
    else:
        check_model_folder(encoder, "--encoder")
        encoder = resolve_reference(encoder)  # a shipped retriever's name: its folder
        backend = resolve_backend(encoder, backend, device)
        model = BiEncoder.load(encoder or "default", resolve_device(device if backend == "torch" else "cpu"))
    model.use_backend(backend, sides, threads)
    return model


def load_dense_manifest(index: Path) -> dict[str, Any]:
    """The manifest of ``INDEX/dense``; a missing index says what to run."""
    index = Path(index)
    manifest_path = index / DENSE_DIR / MANIFEST
    if not manifest_path.exists():
        hint = ""
        if (index / f"{DENSE_DIR}.partial").exists():
            hint = f" (an interrupted encoding is in {index / (DENSE_DIR + '.partial')}: run the same command again)"
        elif (index / SHARDS_DIR).exists():
            hint = f" (shards are in {index / SHARDS_DIR}: merge them with --merge-shards N)"
        raise MissingArtefactError(f"no dense index at {index} (expected {manifest_path}){hint}; build it with "
                                   f"`corefsearch index DATASET --dense --encoder MODEL --out {index}`")

    return read_manifest(manifest_path, DENSE_INDEX, "rebuild the index with `corefsearch index DATASET --dense "
                         f"--encoder MODEL --out {index} --overwrite`")


def check_dense_index_matches_dataset(index: Path, dataset_dir: Path) -> None:
    """Fail clearly when the dense index was built from other passages than the dataset's."""
    manifest = load_dense_manifest(index)
    check_built_from(dataset_dir, manifest.get("passages_sha256"), f"the dense index {index}",
                     f"corefsearch index {dataset_dir} --dense --encoder {manifest['encoder']['reference']} "
                     f"--out {index} --overwrite")
