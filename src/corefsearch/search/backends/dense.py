"""The dense backend: FAISS over an encoder's passage vectors (``INDEX/dense``), built whole, by shards
and their merge, or on a Ray cluster."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corefsearch.base.artefacts import now, write_manifest
from corefsearch.base.errors import InputError
from corefsearch.base.models import check_device
from corefsearch.base.onnx_backend import check_backend_device
from corefsearch.base.shipped import resolve_reference
from corefsearch.datasets.dataset import iter_passages
from corefsearch.dense import faiss_index
from corefsearch.dense import store as dense
from corefsearch.dense.chunks import CHUNK_SIZE, chunk_vectors, link_pyserini_names
from corefsearch.dense.encoder import DEFAULT_BATCH_SIZE
from corefsearch.dense.indexing import build_dense_index, merge_dense_shards, parse_shard
from corefsearch.dense.search import DenseSearcher
from corefsearch.dense.store import load_dense_manifest, load_encoder
from corefsearch.distributed.dense_encoding import build_dense_index_on_ray
from corefsearch.io.write import sha256_file

if TYPE_CHECKING:
    from corefsearch.search.backends import AppendOptions
    from corefsearch.search.options import RetrievalOptions
    from corefsearch.sparse.search import BM25Options


@dataclass
class DenseIndexOptions:
    """``corefsearch index --dense``: the encoder, the FAISS type and how to split the encoding (their ``--help``
    in the metadata)."""

    encoder: str | None = field(default=None, metadata={"help": (
        "With --dense: a retriever folder from `train retriever`, a Hugging Face model name or folder, or `default` "
        "(all-MiniLM-L6-v2, zero-shot).")})
    faiss_type: str = field(default="flat", metadata={"option": "--faiss",
                                                     "help": "With --dense: flat | hnsw | ivfpq."})
    batch_size: int = field(default=DEFAULT_BATCH_SIZE, metadata={"help": (  # `index` picks its default by device
        "Dense: passages per encoder batch (default 32 on the CPU, as sentence-transformers; on a GPU 1,024, halved "
        "while it does not fit in its memory).")})
    shard: str | None = field(default=None, metadata={  # "I/N"
        "help": "With --dense: encode only shard I of N (I/N, I from 0) into OUT/dense-shards/."})
    merge_shards: int | None = field(default=None, metadata={
        "help": "With --dense: merge the N shards in OUT/dense-shards/ into OUT/dense."})
    device: str = field(default="auto", metadata={"help": "With --dense: auto | cpu | cuda."})
    chunk_size: int = field(default=8192, metadata={"help": (  # the unit of resumption and of shards
        "With --dense: passages per saved chunk (what an interrupted run resumes from; shards are whole chunks).")})
    backend: str | None = field(default=None, metadata={"help": (  # the passage encoder's runtime
        "With --dense: run the passage encoder with torch | onnx | onnx-int8 (ONNX Runtime on the CPU, from the export "
        "`corefsearch export-onnx MODEL_DIR` writes; recorded in the manifest); default torch, or onnx-int8 for a "
        "folder that ships only that export.")})
    # corefsearch.distributed.session.RayOptions: encode on a Ray cluster (`--ray`)
    ray: Any = field(default=None, metadata={"cli": False})

    def validate(self) -> None:
        """What no builder checks: the device, the backend on that device and the combinations of
        options. Each value the builder takes (``--faiss``, ``--batch-size``, ``--chunk-size``, ``--shard``,
        ``--merge-shards``, the Ray options) is checked once, by the builder that runs, before its
        output guard and before any work. A shipped retriever's name becomes its folder (what the manifest
        records)."""
        self.encoder = resolve_reference(self.encoder)
        check_device(self.device)
        check_backend_device(self.backend, self.device)
        if self.ray is not None and (self.shard is not None or self.merge_shards is not None):
            raise InputError("--ray encodes every shard on the cluster and merges them: leave out --shard and "
                             "--merge-shards")
        if self.merge_shards is not None:
            if self.shard is not None:
                raise InputError("--shard and --merge-shards do not go together: encode each shard with "
                                 "--shard I/N, then merge them with --merge-shards N")
            if self.backend not in (None, "torch"):
                raise InputError("--backend chooses how passages are encoded; --merge-shards encodes none (each "
                                 "shard's manifest records its backend): leave --backend out")
        elif not self.encoder:
            raise InputError("--dense needs --encoder: a retriever folder from `corefsearch train retriever`, "
                             "a Hugging Face model name or folder, or `default` (all-MiniLM-L6-v2, zero-shot)")


class DenseBackend:
    name = "dense"
    retriever = "dense"
    stores_passages = False  # its texts: a Lucene index of the same passages beside it, else the dataset's file
    Options = DenseIndexOptions

    def load_manifest(self, index: Path) -> dict[str, Any]:
        return load_dense_manifest(index)

    def rebuild_command(self, dataset_dir: Path, index: Path, manifest: dict[str, Any]) -> str:
        return (f"corefsearch index {dataset_dir} --dense --encoder {manifest['encoder']['reference']} --out {index} "
                "--overwrite")

    def build(self, dataset_dir: Path, out: Path, options: DenseIndexOptions, overwrite: bool) -> Any:
        """The dense index, one shard of it, or the merge of the shards."""
        options.validate()

        if options.merge_shards is not None:
            return merge_dense_shards(dataset_dir, out, options.merge_shards, faiss_type=options.faiss_type,
                                      encoder=options.encoder, device=options.device, overwrite=overwrite)
        assert options.encoder  # validate()
        if options.ray is not None:
            return build_dense_index_on_ray(dataset_dir, out, options.encoder, options.ray,
                                            faiss_type=options.faiss_type, batch_size=options.batch_size,
                                            device=options.device, overwrite=overwrite,
                                            chunk_size=options.chunk_size, backend=options.backend)
        shard = parse_shard(options.shard) if options.shard is not None else None
        return build_dense_index(dataset_dir, out, options.encoder, faiss_type=options.faiss_type,
                                 batch_size=options.batch_size, shard=shard, device=options.device,
                                 overwrite=overwrite, chunk_size=options.chunk_size, backend=options.backend)

    def prepare_append(self, index: Path, options: AppendOptions) -> Any:
        """The encoder the dense index was built with (or ``options.encoder``, if it encodes passages the
        same way), loaded and checked."""
        recorded = load_dense_manifest(index)["encoder"]
        model = load_encoder(options.encoder if options.encoder is not None else recorded["reference"],
                             options.device)
        if model.passage_fingerprint() != recorded["passage_fingerprint"]:
            raise InputError(f"the dense index {index} was built with encoder {recorded['reference']}, which encodes "
                             "passages differently from the one given; add with --encoder "
                             f"{recorded['reference']} (or leave --encoder out)")
        return model

    def append(self, index: Path, passages_path: Path, old_count: int, staged: Path, prepared: Any,
               options: AppendOptions) -> int:
        """Encode the new passages, add them to a copy of ``index/dense``'s FAISS index in ``staged``
        (flat and HNSW: ``add``; IVF-PQ: ``add`` with its trained quantiser, not retrained)."""
        import numpy as np

        folder = index / dense.DENSE_DIR
        manifest = dense.load_dense_manifest(index)
        faiss = faiss_index.read_index(folder / dense.FAISS_FILE)
        with (folder / dense.IDS_FILE).open(encoding="utf-8") as handle:
            old_ids = sum(1 for _ in handle)
        if not faiss.ntotal == old_ids == int(manifest["passages"]) == old_count:
            raise InputError(f"{folder} is inconsistent ({faiss.ntotal} vectors, {old_ids} ids, {manifest['passages']} "
                             f"passages in its manifest, {old_count} in the dataset); rebuild it with "
                             f"`corefsearch index DATASET --dense --encoder MODEL --out {index} --overwrite`")
        parameters = manifest["faiss"]
        if parameters.get("type") == "hnsw":
            import faiss as faiss_module

            faiss_module.downcast_index(faiss).hnsw.efConstruction = int(parameters["efConstruction"])
        shutil.copyfile(folder / dense.IDS_FILE, staged / dense.IDS_FILE)
        timer = [0.0]
        count = 0
        with (staged / dense.IDS_FILE).open("a", encoding="utf-8") as ids_handle:
            passages = islice(iter_passages(passages_path), old_count, None)
            # The chunks of build_dense_index: only one chunk's texts and vectors in memory.
            while chunk := list(islice(passages, CHUNK_SIZE)):
                vectors = chunk_vectors(prepared, [p.title for p in chunk], [p.text for p in chunk],
                                        options.batch_size, timer)
                faiss.add(np.ascontiguousarray(vectors, dtype=np.float32))  # IVF-PQ: its trained quantiser
                ids_handle.writelines(f"{p.id}\n" for p in chunk)
                count += len(chunk)
        faiss_index.write_index(faiss, staged / dense.FAISS_FILE)
        link_pyserini_names(staged)
        addition: dict[str, Any] = {"passages": count, "added": now(), "encode_seconds": round(timer[0], 3),
                                    "backend": prepared.backend}  # onnx-int8 for an inference-only encoder
        if parameters.get("type") == "ivfpq":
            addition["note"] = "added with the quantiser trained at build time (not retrained)"
        manifest.update({"passages_sha256": sha256_file(passages_path), "passages": old_count + count,
                         "updated": now(), "additions": [*manifest.get("additions", []), addition]})
        write_manifest(staged / dense.MANIFEST, manifest)
        return count

    def open(self, index: Path, manifest: dict[str, Any], bm25: BM25Options, retrieval: RetrievalOptions) -> Any:
        return DenseSearcher(index, retrieval.encoder, device=retrieval.device, manifest=manifest,
                             backend=retrieval.backend, search_parameters=retrieval.search_parameters)

    def passages(self, index: Path, manifest: dict[str, Any], opened: Any = None) -> Any:
        return None  # it stores no texts

    def use_passages(self, searcher: Any, store: Any) -> None:
        searcher.passages = store  # None: the dataset's passages file
