"""Turn source documents with mentions into a coreference-search dataset directory.

Layout written (see README, "File formats"): ``passages.jsonl``, ``queries/{split}.jsonl``,
``qrels/{split}.txt``, ``clusters.jsonl`` and ``manifest.json``. Passages are streamed to
disk as documents arrive; only a compact table of mentions stays in memory, so the
collection may be far larger than memory.
"""

from __future__ import annotations

import bisect
import hashlib
import random
import warnings
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from corefsearch.base.artefacts import DATASET, manifest_record, write_manifest
from corefsearch.base.checks import at_least_one
from corefsearch.base.errors import InputError
from corefsearch.base.progress import track
from corefsearch.base.schema import SPLITS, Cluster, Document, Passage, PassageMention, Query, safe_id
from corefsearch.datasets.generic import read_distractors
from corefsearch.io.outputs import Output, writes_outputs
from corefsearch.io.read import closing_iterator, read_jsonl
from corefsearch.io.write import atomic_directory, dump_json_line, sha256_file

PASSAGE_MODES = ("sentence", "window", "document")


@dataclass
class BuildOptions:
    """How passages, splits and queries are made; recorded in the manifest. The ``--help`` of ``build-dataset``'s
    options in the metadata (``split_ratios`` and ``splits`` are comma-separated there)."""

    passage: str = field(default="sentence", metadata={"help": "Passage unit: sentence | window | document."})
    window: int = field(default=3, metadata={"help": "Sentences per passage with --passage window."})
    split_ratios: tuple[float, float, float] = field(default=(0.8, 0.1, 0.1), metadata={
        "help": "train,dev,test shares of clusters (with --split-by clusters)."})
    seed: int = field(default=13, metadata={"help": "Seed of the cluster split."})
    splits: tuple[str, ...] = field(default=SPLITS, metadata={
        "help": "Splits to write queries for (ecbplus, coresearch, cdcr-json: also the documents kept)."})
    source: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        if self.passage not in PASSAGE_MODES:
            raise InputError(f"--passage must be one of {', '.join(PASSAGE_MODES)}, got {self.passage!r}")
        at_least_one("--window", self.window)
        if len(self.split_ratios) != 3 or any(r < 0 for r in self.split_ratios) or sum(self.split_ratios) <= 0:
            raise InputError(f"--split-ratios needs three non-negative numbers train,dev,test; "
                             f"got {self.split_ratios}")
        unknown = set(self.splits) - set(SPLITS)
        if unknown or not self.splits:
            raise InputError(f"--splits takes a subset of {', '.join(SPLITS)}, got {', '.join(self.splits)}")


@dataclass
class SplitCounts:
    clusters: int = 0
    queries: int = 0
    relevant_pairs: int = 0


@dataclass
class BuildSummary:
    out: Path
    documents: int = 0
    passages: int = 0
    distractor_passages: int = 0
    mentions: int = 0
    mentions_dropped: int = 0
    clusters: int = 0
    splits: dict[str, SplitCounts] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        record = asdict(self)
        record.pop("out")
        return record


@dataclass
class MentionRef:
    """What :class:`DatasetWriter` keeps in memory for each mention: its query's passage
    (``home_passage``, with the mention's offsets in it), its document's split if the source gives
    one, and every passage that holds it whole."""

    mention_id: str
    cluster_id: str
    type: str
    home_passage: str
    start: int
    end: int
    doc_split: str | None
    passages: list[str]


def _windows(units: Sequence[tuple[int, int]], mode: str, size: int) -> list[tuple[int, int]]:
    """Character ranges of the passages of one document, one per unit (or one in all)."""
    if not units:
        return []
    if mode == "document":
        return [(units[0][0], units[-1][1])]
    if mode == "sentence":
        return list(units)
    before, after = (size - 1) // 2, size // 2
    last = len(units) - 1
    return [(units[max(0, i - before)][0], units[min(last, i + after)][1]) for i in range(len(units))]


def _home_window(mention_start: int, mention_end: int, unit_starts: Sequence[int],
                 units: Sequence[tuple[int, int]], mode: str) -> int | None:
    """Index of the passage a mention's query is drawn from: the one centred on its unit."""
    if mode == "document":
        return 0
    index = bisect.bisect_right(unit_starts, mention_start) - 1
    if index >= 0 and mention_end <= units[index][1]:
        return index
    return None


def _windows_holding(mention_start: int, mention_end: int, window_starts: Sequence[int],
                     window_ends: Sequence[int]) -> range:
    """Indices of the windows that hold a mention whole. Window starts and ends both grow
    with the index, so these form one run: found by bisection, not a scan (long documents)."""
    first = bisect.bisect_left(window_ends, mention_end)
    last = bisect.bisect_right(window_starts, mention_start) - 1
    return range(first, last + 1)


class DatasetWriter:
    """Writes ``root/passages.jsonl`` as documents arrive and keeps the table of their mentions
    (:class:`MentionRef`) from which :func:`write_queries_and_qrels` makes the queries, qrels and
    clusters, :func:`check_splits` warns of empty splits and :func:`write_dataset_manifest` seals the dataset.

    ``append=True`` continues an existing ``passages.jsonl`` (``corefsearch add`` on a copy of a
    dataset): the passages and mentions already in it are made known with :meth:`note_passage` and
    :meth:`note_mention` before new documents are added, so that ids stay unique and the queries are
    made from the old mentions and the new ones together. :meth:`close` closes the file."""

    def __init__(self, root: Path, options: BuildOptions, append: bool = False) -> None:
        self.root = root
        self.options = options
        self.handle = (root / "passages.jsonl").open("a" if append else "w", encoding="utf-8")
        # Passage ids are ``KEY-N`` (KEY: the document's safe id, N: the passage's position, digits
        # only), so two passages share an id exactly when their documents share a key and both have
        # passages: the keys of the documents written so far are all the duplicate check needs, one
        # entry per document rather than per passage (memory grows with the documents, not the
        # passages of a large collection).
        self.document_keys: set[str] = set()
        self.mentions: list[MentionRef] = []
        self.mention_ids: set[str] = set()
        self.summary = BuildSummary(out=root)
        self.fixed_splits = False

    def note_passage(self, passage_id: str) -> None:
        """Count a passage already in the file (``corefsearch add``) against later duplicates."""
        self.document_keys.add(passage_id.rsplit("-", 1)[0])

    def note_mention(self, ref: MentionRef) -> None:
        """Take in a mention of a passage already in the file (``corefsearch add``): its id counts
        against later duplicates and it joins the mentions the queries are made from."""
        self.mention_ids.add(ref.mention_id)
        self.mentions.append(ref)

    def _write_passages(self, key: str, passages: Iterable[Passage], where: str) -> int:
        """Write the passages of the document whose safe id is ``key``; how many."""
        written = 0
        for passage in passages:
            if not written:
                if key in self.document_keys:
                    raise InputError(f"{where}: passage id {passage.id} occurs twice (document ids must be unique, "
                                     "also after white space is replaced by '_')")
                self.document_keys.add(key)
            self.handle.write(dump_json_line(passage.to_json()))
            written += 1
        self.summary.passages += written
        return written

    def add_document(self, doc: Document, where: str) -> None:
        doc.validate(where)
        if doc.split is not None:
            self.fixed_splits = True
            if doc.split not in self.options.splits:
                return
        self.summary.documents += 1
        doc_key = safe_id(doc.doc_id)
        windows = _windows(doc.units, self.options.passage, self.options.window)
        ids = [f"{doc_key}-{i}" for i in range(len(windows))]
        contained: list[list[PassageMention]] = [[] for _ in windows]
        unit_starts = [start for start, _ in doc.units]
        window_starts, window_ends = [start for start, _ in windows], [end for _, end in windows]
        for mention in doc.mentions:
            mention_id = safe_id(mention.mention_id)
            home = _home_window(mention.start, mention.end, unit_starts, doc.units, self.options.passage)
            if home is None:
                # Spans two sentences, or lies outside every unit (e.g. a dropped URL line).
                self.summary.mentions_dropped += 1
                continue
            if mention_id in self.mention_ids:
                raise InputError(f"{where}: mention id {mention_id} occurs twice")
            self.mention_ids.add(mention_id)
            inside = _windows_holding(mention.start, mention.end, window_starts, window_ends)
            for i in inside:
                offset = windows[i][0]
                contained[i].append(PassageMention(mention_id, mention.start - offset, mention.end - offset,
                                                   str(mention.cluster_id), mention.type))
            offset = windows[home][0]
            self.mentions.append(MentionRef(mention_id, str(mention.cluster_id), mention.type, ids[home],
                                             mention.start - offset, mention.end - offset, doc.split,
                                             [ids[i] for i in inside]))
            self.summary.mentions += 1
        self._write_passages(doc_key, (Passage(ids[i], doc.doc_id, doc.title, doc.text[start:end], contained[i],
                                               doc.split, doc.topic) for i, (start, end) in enumerate(windows)), where)

    def add_distractor(self, doc: Document, where: str) -> None:
        doc.validate(where)
        if doc.mentions:
            raise InputError(f"{where}: distractor {doc.doc_id} holds mentions; distractors are passages "
                             "without mentions")
        key = safe_id(doc.doc_id)
        windows = _windows(doc.units, self.options.passage, self.options.window)
        self.summary.distractor_passages += self._write_passages(
            key, (Passage(f"{key}-{i}", doc.doc_id, doc.title, doc.text[start:end])
                  for i, (start, end) in enumerate(windows)), where)

    def close(self) -> None:
        self.handle.close()


def new_cluster_split(cluster_id: str, options: BuildOptions) -> str:
    """The split of a cluster that ``corefsearch add`` brings into a dataset split by clusters: a
    seeded hash of its id placed against ``split_ratios``. It depends on nothing else (not on the
    other clusters, nor on the order or batch they come in), so it is deterministic; the shares of
    the new clusters follow the ratios on average only."""
    digest = hashlib.sha256(f"{options.seed}:{cluster_id}".encode()).digest()
    position = int.from_bytes(digest[:8], "big") / 2 ** 64 * sum(options.split_ratios)
    train, dev = options.split_ratios[0], options.split_ratios[0] + options.split_ratios[1]
    return "train" if position < train else "dev" if position < dev else "test"


def _cluster_splits(members: dict[str, list[MentionRef]], options: BuildOptions,
                    fixed: bool, kept: dict[str, str] | None = None) -> dict[str, str]:
    """Split of each cluster: the split of its documents, or a seeded shuffle by ratio.

    With fixed (document) splits a cluster whose mentions lie in documents of several splits
    takes the split most of its mentions have (ties: the first mention's); its queries still
    take their own document's split (see ``write_queries_and_qrels``), as ECB+ does.
    ``kept`` (from ``corefsearch add``, split by clusters only): the splits the clusters of the
    dataset already have, which they keep; the other clusters take :func:`new_cluster_split`.
    """
    if fixed:
        return {cid: Counter(ref.doc_split or "train" for ref in refs).most_common(1)[0][0]
                for cid, refs in members.items()}
    if kept is not None:
        return {cid: kept[cid] if cid in kept else new_cluster_split(cid, options) for cid in members}
    cluster_ids = sorted(members)
    random.Random(options.seed).shuffle(cluster_ids)
    total = sum(options.split_ratios)
    n_train = round(len(cluster_ids) * options.split_ratios[0] / total)
    n_dev = round(len(cluster_ids) * options.split_ratios[1] / total)
    splits = {}
    for position, cid in enumerate(cluster_ids):
        splits[cid] = "train" if position < n_train else "dev" if position < n_train + n_dev else "test"
    return splits


def _build_outputs(a: dict[str, Any]) -> list[Output]:
    """The dataset folder, which must not be, hold or lie in the corpus (``options.source["input"]``,
    ``options.source["sentences_csv"]``) or a distractors file."""
    source = a["options"].source or {}
    inputs = [("INPUT", source.get("input")), ("--sentences-csv", source.get("sentences_csv")),
              *(("--distractors", path) for path in a["distractors"] or ())]
    return [Output(a["out"], "--out", "dir", inputs)]


@writes_outputs(_build_outputs)
def build_dataset(documents: Iterable[Document], out: Path, options: BuildOptions,
                  distractors: Sequence[Path] = (), overwrite: bool = False,
                  source_name: str = "documents") -> BuildSummary:
    """Write the dataset directory ``out`` from ``documents`` (and distractor files)."""
    options.validate()
    with atomic_directory(out, overwrite=overwrite) as root:
        writer = DatasetWriter(root, options)
        try:
            read = 0
            # The readers' generators (and the files they hold open) are closed as each loop ends,
            # also when a document is refused: see corefsearch.io.read.closing_iterator.
            with closing_iterator(documents), closing_iterator(track(documents, "Reading documents")) as tracked:
                for read, doc in enumerate(tracked, start=1):
                    writer.add_document(doc, f"{source_name}: document {read} ({doc.doc_id})")
            _check_has_mentions(writer, read, source_name)
            for path in distractors:
                with (closing_iterator(read_distractors(path)) as distractor_documents,
                      closing_iterator(track(distractor_documents, f"Distractors {path.name}")) as tracked):
                    for number, doc in enumerate(tracked, start=1):
                        writer.add_distractor(doc, f"{path}:{number}")
        finally:
            writer.close()
        summary = writer.summary
        summary.out = Path(out)
        if summary.mentions_dropped:
            warnings.warn(f"{summary.mentions_dropped} mention(s) cross a passage boundary and were left out",
                          stacklevel=2)
        write_queries_and_qrels(root, writer, options, summary)
        check_splits(summary, options, writer.fixed_splits, source_name)
        write_dataset_manifest(root, options, summary)
    return summary


def _check_has_mentions(writer: DatasetWriter, read: int, source_name: str) -> None:
    """A dataset without documents, passages or mentions would look fine and hold nothing: refuse it."""
    summary, options = writer.summary, writer.options
    if read == 0:
        raise InputError(f"{source_name}: holds no documents; nothing to build a dataset from")
    if summary.documents == 0:
        raise InputError(f"{source_name}: none of its {read:,} document(s) is in the split(s) "
                         f"{','.join(options.splits)} (--splits)")
    if summary.passages == 0:
        raise InputError(f"{source_name}: its {summary.documents:,} document(s) hold no text to make passages of")
    if summary.mentions == 0 and not is_plain(options):
        why = (f"all {summary.mentions_dropped:,} cross a passage boundary (try --passage window or document)"
               if summary.mentions_dropped else "queries are made of mentions (see README, File formats; documents "
               "without mentions build with --format text)")
        raise InputError(f"{source_name}: its {summary.documents:,} document(s) hold no mention to make queries "
                         f"of; {why}")


def is_plain(options: BuildOptions) -> bool:
    """Whether the source is declared to hold plain documents, without gold mentions
    (``options.source["mentions"] == "none"``, see ``sources.plain_source``)."""
    return (options.source or {}).get("mentions") == "none"


def check_splits(summary: BuildSummary, options: BuildOptions, fixed: bool, source_name: str) -> None:
    """A dataset or a split left without queries is a warning that says why and what to do (none for a
    dataset of plain documents, which has no mentions to make queries of)."""
    if is_plain(options) and summary.mentions == 0:
        return
    if not any(counts.queries for counts in summary.splits.values()):
        # Still a collection to index and search by hand, so not an error.
        warnings.warn(f"{source_name}: the dataset has no queries: no cluster has mentions in two different "
                      f"passages ({summary.mentions:,} mention(s) in {summary.clusters:,} cluster(s)); "
                      "evaluation needs clusters whose mentions are in two passages or more", stacklevel=3)
        return
    with_queries = [split for split, counts in summary.splits.items() if counts.queries]
    for split, counts in summary.splits.items():
        if counts.queries:
            continue
        if fixed:
            warnings.warn(f"split {split!r} has no queries: no cluster of its documents has mentions in two "
                          f"passages; leave it out with --splits {','.join(with_queries)}", stacklevel=3)
        elif options.split_ratios[SPLITS.index(split)] > 0:  # a ratio of 0 asked for an empty split
            warnings.warn(f"split {split!r} has no queries: too few clusters with queries "
                          f"({sum(c.clusters for c in summary.splits.values()):,}) for --split-ratios "
                          f"{','.join(f'{r:g}' for r in options.split_ratios)}; raise its ratio, or leave it out "
                          f"with --splits {','.join(with_queries)}", stacklevel=3)


def write_queries_and_qrels(root: Path, writer: DatasetWriter, options: BuildOptions,
                             summary: BuildSummary, kept_splits: dict[str, str] | None = None) -> None:
    members: dict[str, list[MentionRef]] = defaultdict(list)
    for ref in writer.mentions:
        members[ref.cluster_id].append(ref)
    cluster_split = _cluster_splits(members, options, writer.fixed_splits, kept_splits)
    summary.clusters = len(members)
    mixed = sorted(cid for cid, refs in members.items() if len({ref.doc_split for ref in refs}) > 1)
    if mixed:
        warnings.warn(f"{len(mixed):,} cluster(s) have mentions in documents of different splits (e.g. {mixed[0]}): "
                      "each query takes the split of its own document, and its qrels keep the relevant passages "
                      "of every split", stacklevel=2)

    # Queries need their passage's text: fetch only those passages in a second streaming pass.
    query_refs = [ref for cid, refs in members.items() if len({r.home_passage for r in refs}) >= 2
                  for ref in refs]
    wanted = {ref.home_passage for ref in query_refs}
    texts: dict[str, str] = {}
    with closing_iterator(read_jsonl(root / "passages.jsonl")) as records:
        for _, record in records:
            if record["id"] in wanted:
                texts[record["id"]] = record["text"]

    queries: dict[str, list[Query]] = {split: [] for split in options.splits}
    qrels: dict[str, list[tuple[str, str, int]]] = {split: [] for split in options.splits}
    for ref in query_refs:
        split = ref.doc_split if ref.doc_split is not None else cluster_split[ref.cluster_id]
        if split not in queries:
            continue
        text = texts[ref.home_passage]
        queries[split].append(Query(ref.mention_id, ref.home_passage, text, ref.start, ref.end,
                                    text[ref.start:ref.end], ref.cluster_id, ref.type))
        relevant = {pid for other in members[ref.cluster_id] if other.mention_id != ref.mention_id
                    for pid in other.passages} - {ref.home_passage}
        qrels[split].extend((ref.mention_id, pid, 1) for pid in sorted(relevant))

    (root / "queries").mkdir()
    (root / "qrels").mkdir()
    for split in options.splits:
        counts = SplitCounts()
        counts.clusters = sum(1 for cid, refs in members.items() if cluster_split[cid] == split
                              and len({r.home_passage for r in refs}) >= 2)
        counts.queries = len(queries[split])
        counts.relevant_pairs = len(qrels[split])
        summary.splits[split] = counts
        with (root / "queries" / f"{split}.jsonl").open("w", encoding="utf-8") as handle:
            for query in queries[split]:
                handle.write(dump_json_line(query.to_json()))
        with (root / "qrels" / f"{split}.txt").open("w", encoding="utf-8") as handle:
            for qid, pid, relevance in qrels[split]:
                handle.write(f"{qid} 0 {pid} {relevance}\n")

    with (root / "clusters.jsonl").open("w", encoding="utf-8") as handle:
        for cid in sorted(members):
            refs = members[cid]
            passages = sorted({pid for ref in refs for pid in ref.passages})
            cluster = Cluster(cid, cluster_split[cid], refs[0].type, [r.mention_id for r in refs], passages)
            handle.write(dump_json_line(cluster.to_json()))


def dataset_manifest(root: Path, options: BuildOptions, summary: BuildSummary) -> dict[str, Any]:
    """The manifest of the dataset files in ``root``: the build options, the counts and each file's checksum."""
    files = ["passages.jsonl", "clusters.jsonl"]
    files += [f"queries/{s}.jsonl" for s in options.splits] + [f"qrels/{s}.txt" for s in options.splits]
    return manifest_record(DATASET, {
        "options": {**asdict(options), "split_ratios": list(options.split_ratios),
                    "splits": list(options.splits)},
        "counts": summary.to_json(),
        "checksums": {name: "sha256:" + sha256_file(root / name) for name in files},
    })


def write_dataset_manifest(root: Path, options: BuildOptions, summary: BuildSummary) -> None:
    write_manifest(root / "manifest.json", dataset_manifest(root, options, summary))