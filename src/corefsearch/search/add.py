"""``corefsearch add``: append documents to a dataset and to its indexes, without a rebuild.

The new documents (what ``build-dataset`` reads: the generic format's folder, ``corpus.jsonl`` with
or without ``mentions.jsonl``; or plain documents as ``--format text`` reads them: a folder of
``.txt``/``.md`` files, sub-folders too, a ``.csv``/``.tsv``/``.jsonl`` table, titles and columns
taken as the dataset's were unless told otherwise) are cut into passages by the dataset's own rules
(``--passage``, ``--sentences``, mention type and split rule, read from its manifest) and appended
to ``passages.jsonl``; queries, qrels and clusters are recomputed from the mentions of the old
passages plus the new mentions, so a query changes only when a new mention joins its cluster (a new
relevant passage) and a new mention becomes a query when its cluster has mentions in two passages or
more. Split rule:

- split by corpus (each document its own split: ECB+, CoreSearch, generic with ``split``): as
  in a fresh build, every query takes its document's split; queries and qrels equal those of
  a fresh build of the old and new documents together.
- split by clusters (a seeded shuffle): a fresh build would shuffle all the clusters again and
  could move old clusters (and the queries a model was trained on) to other splits. ``add``
  keeps the split of every cluster the dataset has; a new cluster takes
  :func:`corefsearch.datasets.build.new_cluster_split` (a seeded hash of its id against the
  ratios). The queries and qrels, all splits together, equal a fresh build's; each one's split
  is its cluster's.

A dataset that holds predicted mentions (``corefsearch detect``) keeps them, and the detector that
found them (its manifest names it; it must still be there, with the same weights) detects the new
passages, appended to ``predicted_mentions.jsonl``.

Each index named (``INDEX/lucene``, ``INDEX/dense``, whichever are there) takes the new passages
only: Lucene through Anserini's indexer in append mode (``-append``) on a copy of the index
whose files are hard links (Lucene never rewrites a file, so the old index is never touched);
the dense index encodes the new passages with the encoder it was built with and adds them to
its FAISS index (flat and HNSW: ``add``; IVF-PQ: ``add`` with its trained quantiser, not
retrained).

Atomicity: the new dataset and indexes are written beside the old ones (hidden ``.NAME.*.partial``
folders) while every output is locked (as every writer locks); only when all are complete are
they switched in, each by two renames (the old folder to ``.NAME.old``, the new one to ``NAME``).
An error before that leaves everything as it was; an error during the switch puts the old
folders back. A kill in the few milliseconds of the switch can leave some outputs switched and
others not (the indexes then refuse to run against the dataset, naming the rebuild); a kill
between the two renames of one folder is repaired by the next corefsearch writer of it, which
puts ``.NAME.old`` back.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corefsearch.base.artefacts import now, write_manifest
from corefsearch.base.checks import all_at_least_one
from corefsearch.base.errors import InputError, MissingArtefactError
from corefsearch.base.progress import track
from corefsearch.base.schema import safe_id
from corefsearch.base.segmentation import DEFAULT_SENTENCES
from corefsearch.datasets import build
from corefsearch.datasets.build import BuildOptions, MentionRef
from corefsearch.datasets.dataset import Dataset, check_built_from, iter_passages
from corefsearch.datasets.generic import CORPUS_FILE, read_generic
from corefsearch.datasets.text import TextOptions, TextReport, corpus_source, read_text
from corefsearch.dense.encoder import DEFAULT_BATCH_SIZE
from corefsearch.detect.run import append_predicted, dataset_detector
from corefsearch.io.outputs import check_no_overlap, output_locks
from corefsearch.io.read import read_jsonl
from corefsearch.io.trec import read_qrels
from corefsearch.io.write import sha256_file
from corefsearch.search.backends import BACKENDS, AppendOptions, IndexBackend, backends_in

if TYPE_CHECKING:
    from corefsearch.datasets.build import BuildOptions, DatasetWriter
    from corefsearch.dense.model import BiEncoder


@dataclass
class AddSummary:
    dataset: Path
    documents: int = 0  # documents added
    passages: int = 0  # passages added
    mentions: int = 0  # mentions added
    mentions_dropped: int = 0
    total_passages: int = 0  # passages in the dataset now
    new_queries: int = 0  # queries that were not there before
    changed_queries: int = 0  # queries that were there and gained relevant passages
    new_clusters: int = 0
    indexes: list[str] = field(default_factory=list)  # what was appended to, e.g. "INDEX/lucene (+12)"
    seconds: float = 0.0
    predicted_mentions: int | None = None  # found by the dataset's detector in the new passages (None: it has none)
    read: list[str] = field(default_factory=list)  # how plain documents were read (titles, columns, skipped)


def _staging_dir(target: Path) -> Path:
    """A hidden folder beside ``target`` named as :func:`corefsearch.io.write.atomic_directory` names its
    own (``.NAME.<random>.partial``), so that the next writer of ``target`` cleans up what a killed
    run left; with ``target``'s permissions."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent))
    shutil.copymode(target, tmp)
    return tmp


def _rename(source: Path, destination: Path) -> None:
    os.replace(source, destination)


def _switch(pairs: Sequence[tuple[Path, Path]]) -> None:
    """Move each staged folder onto its target, the old target kept as ``.NAME.old`` until all are
    in place; on an error, put every old target back. Then remove the old ones."""
    done: list[tuple[Path, Path]] = []
    try:
        for target, staged in pairs:
            old = target.with_name(f".{target.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            _rename(target, old)
            try:
                _rename(staged, target)
            except BaseException:
                _rename(old, target)
                raise
            done.append((target, old))
    except BaseException:
        for target, old in reversed(done):
            trash = target.with_name(f".{target.name}.rollback")
            shutil.rmtree(trash, ignore_errors=True)
            os.replace(target, trash)
            os.replace(old, target)
            shutil.rmtree(trash, ignore_errors=True)
        raise
    for _, old in done:
        shutil.rmtree(old, ignore_errors=True)


# --- the dataset ------------------------------------------------------------------------------


def _build_options(dataset: Dataset) -> BuildOptions:
    recorded = dataset.manifest.get("options")
    if not isinstance(recorded, dict):
        raise InputError(f"{dataset.root / 'manifest.json'} records no build options; rebuild the dataset with "
                         "`corefsearch build-dataset`")
    options = BuildOptions(passage=recorded.get("passage", "sentence"), window=int(recorded.get("window", 3)),
                           split_ratios=tuple(recorded.get("split_ratios", (0.8, 0.1, 0.1))),  # type: ignore[arg-type]
                           seed=int(recorded.get("seed", 13)),
                           splits=tuple(recorded.get("splits", ("train", "dev", "test"))),
                           source=dict(recorded.get("source") or {}))
    options.validate()
    if options.passage == "window":
        # A window passage holds the mentions of its neighbours too; which window is a mention's
        # own (its query's) is not recorded in the dataset, so its queries could not be rebuilt.
        raise InputError(f"{dataset.root} was built with --passage window, which `corefsearch add` does not "
                         "support (a mention's own window is not recorded in the dataset); rebuild it with "
                         "`corefsearch build-dataset` over all the documents")
    return options


def text_options_of(options: BuildOptions, given: TextOptions | None = None) -> TextOptions:
    """How new plain documents are read: as ``given`` says where it says, else as the dataset's were."""
    source = options.source
    recorded = TextOptions(None if source.get("title") in (None, "auto") else source.get("title"),
                           source.get("text_field"), source.get("id_field"), source.get("title_field"))
    if given is None:
        return recorded
    if given.fields_given:  # a table's columns are named together, or not at all
        recorded.text_field, recorded.id_field, recorded.title_field = given.text_field, given.id_field, \
            given.title_field
    if given.title is not None:
        recorded.title = given.title
    return recorded


def _documents(corpus: Path, options: BuildOptions, fixed: bool, text_options: TextOptions | None,
               report: TextReport) -> Iterator[Any]:
    """The new documents, read as the dataset's own source options say; ``fixed``: the dataset's passages
    carry their document's split (split by corpus), so every new document must carry one too."""
    corpus = Path(corpus)
    if not corpus.exists():
        raise MissingArtefactError(f"--corpus {corpus}: no such file or folder")
    source = options.source
    passage = "document" if options.passage == "document" else "sentence"
    sentences = source.get("sentences") or DEFAULT_SENTENCES
    split_by = "corpus" if fixed else "clusters"
    if corpus.is_dir() and (corpus / CORPUS_FILE).exists() and (text_options is None or not text_options.fields_given):
        if text_options is not None and text_options.title is not None:
            raise InputError(f"--title applies to text files; the titles of {corpus / CORPUS_FILE} are its 'title' "
                             "fields")
        mention_type = source.get("mention_type") or ("all" if source.get("format", "generic") in ("generic", "text")
                                                      else "event")
        return read_generic(corpus, passage=passage, sentences=sentences, mention_type=mention_type,
                            split_by=split_by, require_mentions=False)
    plain = text_options_of(options, text_options)
    if corpus_source(corpus) is not None and (text_options is None or text_options.title is None):
        plain.title = None  # a table has its titles in a column: the dataset's --title is for text files
    if corpus_source(corpus) is None and (text_options is None or not text_options.fields_given):
        plain.text_field = plain.id_field = plain.title_field = None  # the columns of the dataset's table
    return read_text(corpus, passage, sentences=sentences, split_by=split_by, options=plain, report=report)


def _old_state(dataset: Dataset, writer: DatasetWriter) -> tuple[set[str], int]:
    """Load into ``writer`` what build knew of the dataset's passages and mentions: their ids and
    the mention table, read back from the passages (each mention lies in one passage, its own, in
    sentence and document passages). Returns the document ids and the number of passages."""
    doc_ids: set[str] = set()
    count = 0
    seen_in: dict[str, str] = {}
    for count, passage in enumerate(dataset.passages(), start=1):
        writer.note_passage(passage.id)
        doc_ids.add(passage.doc_id)
        if passage.split is not None:
            writer.fixed_splits = True
        for m in passage.mentions:
            if m.mention_id in seen_in:
                raise InputError(f"{dataset.passages_path}:{count}: mention {m.mention_id} is in passages "
                                 f"{seen_in[m.mention_id]} and {passage.id}; `corefsearch add` needs a dataset whose "
                                 "mentions each lie in one passage (rebuild it with `corefsearch build-dataset`)")
            seen_in[m.mention_id] = passage.id
            writer.note_mention(MentionRef(m.mention_id, m.cluster_id, m.type, passage.id, m.start, m.end,
                                           passage.split, [passage.id]))
    return doc_ids, count


def _queries(root: Path, splits: Sequence[str]) -> dict[str, str]:
    """Query id -> its JSON line, all splits together."""
    lines: dict[str, str] = {}
    for split in splits:
        path = root / "queries" / f"{split}.jsonl"
        if path.exists():
            for _, record in read_jsonl(path):
                lines[str(record["id"])] = json.dumps(record, sort_keys=True)
    return lines


def _qrels(root: Path, splits: Sequence[str]) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    for split in splits:
        path = root / "qrels" / f"{split}.txt"
        if path.exists():
            qrels.update(read_qrels(path))
    return qrels


def _stage_dataset(dataset: Dataset, corpus: Path, staged: Path, summary: AddSummary,
                   text_options: TextOptions | None = None) -> int:
    """Write the dataset with the new documents into ``staged``; return the old number of passages."""
    options = _build_options(dataset)
    counts = dataset.manifest.get("counts") or {}
    recorded = dataset.manifest.get("checksums", {}).get("passages.jsonl", "").removeprefix("sha256:")
    if recorded and sha256_file(dataset.passages_path) != recorded:
        raise InputError(f"{dataset.passages_path} changed since the dataset was built (its checksum is not the "
                         "manifest's); rebuild the dataset with `corefsearch build-dataset`")
    shutil.copyfile(dataset.passages_path, staged / "passages.jsonl")
    writer = build.DatasetWriter(staged, options, append=True)
    try:
        doc_ids, old_count = _old_state(dataset, writer)
        old_mentions = len(writer.mentions)
        new = writer.summary
        new.documents, new.passages = int(counts.get("documents", 0)), old_count
        new.distractor_passages = int(counts.get("distractor_passages", 0))
        new.mentions, new.mentions_dropped = old_mentions, int(counts.get("mentions_dropped", 0))
        read = 0
        report = TextReport()
        documents = _documents(corpus, options, writer.fixed_splits, text_options, report)
        for read, doc in enumerate(track(documents, "Reading documents"), start=1):
            where = f"{corpus}: document {read} ({doc.doc_id})"
            if safe_id(doc.doc_id) in doc_ids:
                raise InputError(f"{where}: document {doc.doc_id} is already in the dataset {dataset.root}; "
                                 "`corefsearch add` appends new documents only (give it another doc_id, or rebuild)")
            writer.add_document(doc, where)
    finally:
        writer.close()
    summary.read = report.lines()
    if read == 0:
        raise InputError(f"--corpus {corpus}: holds no documents; nothing to add")
    summary.documents = new.documents - int(counts.get("documents", 0))
    summary.passages = new.passages - old_count
    summary.mentions = new.mentions - old_mentions
    summary.mentions_dropped = new.mentions_dropped - int(counts.get("mentions_dropped", 0))
    summary.total_passages = new.passages
    if summary.passages == 0:
        raise InputError(f"--corpus {corpus}: none of its {read:,} document(s) gives a passage (no text, or none "
                         f"in the split(s) {','.join(options.splits)}); nothing to add")
    if summary.mentions_dropped:
        warnings.warn(f"{summary.mentions_dropped} new mention(s) cross a passage boundary and were left out",
                      stacklevel=3)

    # Split by clusters: the clusters the dataset has keep their split (see the module doc).
    old_splits = {cluster.cluster_id: cluster.split for cluster in dataset.clusters()}
    build.write_queries_and_qrels(staged, writer, options, new, None if writer.fixed_splits else old_splits)
    build.check_splits(new, options, writer.fixed_splits, str(dataset.root))
    manifest = build.dataset_manifest(staged, options, new)
    manifest["created"] = dataset.manifest.get("created", manifest["created"])
    manifest["updated"] = now()
    manifest["additions"] = [*dataset.manifest.get("additions", []),
                             {"corpus": str(Path(corpus).resolve()), "added": manifest["updated"],
                              "documents": summary.documents, "passages": summary.passages,
                              "mentions": summary.mentions}]
    write_manifest(staged / "manifest.json", manifest)

    before_queries, after_queries = _queries(dataset.root, options.splits), _queries(staged, options.splits)
    before_qrels, after_qrels = _qrels(dataset.root, options.splits), _qrels(staged, options.splits)
    summary.new_queries = len(after_queries.keys() - before_queries.keys())
    summary.changed_queries = sum(1 for qid in before_queries if after_qrels.get(qid) != before_qrels.get(qid))
    summary.new_clusters = len({ref.cluster_id for ref in writer.mentions} - old_splits.keys())
    return old_count


# --- the command ------------------------------------------------------------------------------


def add_documents(dataset_dir: Path, corpus: Path, indexes: Sequence[Path] = (),
                  encoder: str | BiEncoder | None = None, device: str = "auto",
                  batch_size: int = DEFAULT_BATCH_SIZE, threads: int = 2,
                  text_options: TextOptions | None = None) -> AddSummary:
    """Append the documents at ``corpus`` (a generic-format folder, or plain documents read with ``text_options``
    over the dataset's own) to ``dataset_dir`` and to each of ``indexes`` (their ``lucene`` and ``dense``
    folders, whichever they hold); see the module doc."""
    started = time.perf_counter()
    dataset_dir, corpus = Path(dataset_dir), Path(corpus)
    dataset = Dataset(dataset_dir)
    all_at_least_one({"--batch-size": batch_size, "--threads": threads})
    check_no_overlap(dataset_dir, "DATASET", {"--corpus": corpus})
    _build_options(dataset)  # a dataset add cannot grow fails before anything is read
    if text_options is not None:
        text_options.check()

    targets: list[tuple[Path, str]] = [(dataset_dir, "DATASET")]
    plan: list[tuple[Path, IndexBackend]] = []
    appending = AppendOptions(encoder, device, batch_size, threads)
    for index in map(Path, dict.fromkeys(indexes)):
        found = list(backends_in(index))
        if not found:
            folders = " or ".join(str(index / name) for name in BACKENDS)
            raise MissingArtefactError(f"--index {index}: holds no Lucene or dense index (no {folders}); build one "
                                       "with `corefsearch index`")
        for backend in found:
            manifest = backend.load_manifest(index)
            check_built_from(dataset_dir, manifest.get("passages_sha256"), f"the {backend.name} index {index}",
                             backend.rebuild_command(dataset_dir, index, manifest))
            plan.append((index, backend))
            targets.append((index / backend.name, "--index"))
    # Each output is replaced whole: none may hold or lie in another one, or in the corpus.
    for target, option in targets[1:]:
        check_no_overlap(target, option, {"DATASET": dataset_dir, "--corpus": corpus})
    # What each backend needs loaded and checked (the dense encoder) before any work.
    prepared = {(index, backend.name): backend.prepare_append(index, appending) for index, backend in plan}

    detection = dataset_detector(dataset, device)  # the detector of its predicted mentions, if it has some
    if not indexes:
        warnings.warn(f"no --index given: the indexes of {dataset_dir} are left as they are and no longer match it "
                      "(search refuses them); name each with --index next time", stacklevel=2)

    summary = AddSummary(dataset_dir)
    with output_locks(targets), contextlib.ExitStack() as cleanup:
        staged: list[tuple[Path, Path]] = []

        def stage(target: Path) -> Path:
            folder = _staging_dir(target)
            cleanup.callback(shutil.rmtree, folder, True)  # gone after the switch; removed on an error
            staged.append((target, folder))
            return folder

        dataset_stage = stage(dataset_dir)
        old_count = _stage_dataset(dataset, corpus, dataset_stage, summary, text_options)
        passages_path = dataset_stage / "passages.jsonl"
        if detection is not None:
            summary.predicted_mentions = append_predicted(*detection, dataset_dir, dataset_stage,
                                                          islice(iter_passages(passages_path), old_count, None),
                                                          batch_size)
        for index, backend in plan:
            added = backend.append(index, passages_path, old_count, stage(index / backend.name),
                                   prepared[(index, backend.name)], appending)
            summary.indexes.append(f"{index / backend.name} (+{added:,})")
        _switch(staged)
    summary.seconds = time.perf_counter() - started
    return summary
