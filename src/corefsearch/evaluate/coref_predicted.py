"""Scoring a clustering of predicted mentions (``corefsearch cluster --mentions predicted``, or any system's)
against a dataset's gold clusters, as Cattan et al. (2021) do for cross-document coreference over
predicted mentions.

A clusters file of predicted mentions gives each line its span: ``{"mention_id", "cluster_id",
"passage_id", "start", "end", "doc_id"?, "detector"?}`` (offsets into the passage's text, end
exclusive). A response mention is matched to a gold mention by its exact span (strict matching): the
same passage and offsets as one of the passages that hold the gold mention. A gold mention is listed in
every passage that holds it whole (window passages overlap), so this is the same document span
whichever passage the detector found it in; a second response mention on the span of an already matched
gold mention (the same span found in two overlapping windows) is left twinless, with a warning.

The key is every gold mention of the passages of the split (``passage.split``; ``all``: every
passage, the default when no passage records a split, else ``test``) that ``clusters.jsonl`` lists, in
its gold cluster: singletons and within-document chains too, when the dataset keeps them (ECB+ built
with ``--chains all``). Twinless mentions are then scored as the CoNLL reference scorer v8 does
(``coref.py``): a key mention without a response twin lowers recall, a response mention without a key
twin lowers precision.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from corefsearch.base.errors import InputError
from corefsearch.base.schema import SPLITS, RecordFields
from corefsearch.datasets.dataset import Dataset
from corefsearch.io.read import closing_iterator, read_jsonl

SPAN_FIELDS = ("passage_id", "start", "end")
ALL_PASSAGES = "all"
# Key and response ids are prefixed so that a predicted mention's own id never meets a gold id.
GOLD_PREFIX = "gold:"
PREDICTED_PREFIX = "predicted:"


def has_spans(path: Path) -> bool:
    """Whether a clusters file holds predicted mentions: its first line gives a span (any of
    :data:`SPAN_FIELDS`). An empty file holds none."""
    with closing_iterator(read_jsonl(Path(path))) as records:
        for _, record in records:
            return any(name in record for name in SPAN_FIELDS)
    return False


@dataclass
class _ResponseLine:
    line: int
    mention_id: str
    cluster_id: str
    passage_id: str
    doc_id: str | None
    start: int
    end: int


@dataclass
class PredictedMatch:
    """Key and response of predicted mentions, ready for ``score_partitions``, and how they matched."""

    key: dict[str, str]  # gold mentions of the split (prefixed ids) -> gold cluster
    response: dict[str, str]  # response mentions of the split (a matched one under its gold twin's id)
    matched: int  # response mentions with a gold twin (exact span)
    detector: str | None  # the detector the clusters file names, if any
    split: str  # the split scored (all: every passage)
    warnings: list[str] = field(default_factory=list)

    @property
    def predicted(self) -> int:
        return len(self.response)


def _read_lines(path: Path) -> tuple[list[_ResponseLine], str | None]:
    """Every line of a clusters file of predicted mentions, checked, and the detector it names."""
    lines: list[_ResponseLine] = []
    first_line: dict[str, int] = {}
    detector: str | None = None
    for line_number, record in read_jsonl(path):
        fields = RecordFields(record, f"{path}:{line_number}")
        mention_id = fields.ident("mention_id")
        fields.subject = f"mention {mention_id}"
        cluster_id = fields.ident("cluster_id")
        if not any(name in record for name in SPAN_FIELDS):
            raise fields.error("gives no span (passage_id, start, end), but line 1 does: a clusters file holds gold "
                               "mentions (dataset ids) or predicted ones (each with its span), not both")
        passage_id = fields.ident("passage_id")
        start, end = fields.integer("start"), fields.integer("end")
        if not 0 <= start < end:
            raise fields.error(f"offsets [{start}, {end}) are not a non-empty span (end is exclusive)")
        doc_id = fields.ident("doc_id", None)
        detector = detector or fields.ident("detector", None)
        if mention_id in first_line:
            raise InputError(f"{path}:{line_number}: mention {mention_id} occurs twice "
                             f"(first on line {first_line[mention_id]}); each mention belongs to one cluster")
        first_line[mention_id] = line_number
        lines.append(_ResponseLine(line_number, mention_id, cluster_id, passage_id, doc_id, start, end))
    return lines, detector


def match_predicted(path: Path, dataset_dir: Path, split: str | None = None) -> PredictedMatch:
    """Read the clusters file of predicted mentions ``path`` and the gold key of ``split`` (``all``: every
    passage; ``None``: ``all`` when no passage records a split, else ``test``) in one pass over the passages,
    and match the response mentions to gold ones by exact span."""
    if split is not None and split not in (*SPLITS, ALL_PASSAGES):
        raise InputError(f"--split must be one of {', '.join((*SPLITS, ALL_PASSAGES))}, got {split!r}")
    path = Path(path)
    dataset = Dataset(dataset_dir)
    lines, detector = _read_lines(path)
    if not lines:
        raise InputError(f"{path} has no mention (it is empty)")
    gold_cluster = {mention_id: cluster.cluster_id for cluster in dataset.clusters()
                    for mention_id in cluster.mention_ids}
    wanted = {line.passage_id for line in lines}
    passages: dict[str, tuple[str, str | None, int]] = {}  # passage -> (document, split, text length)
    spans: dict[tuple[str, int, int], str] = {}  # (passage, start, end) -> the gold mention there
    gold: list[tuple[str | None, str, str]] = []  # (its passage's split, gold mention, its cluster)
    splits_seen: set[str | None] = set()
    for passage in dataset.passages():
        splits_seen.add(passage.split)
        if passage.id in wanted:
            passages[passage.id] = (passage.doc_id, passage.split, len(passage.text))
        for mention in passage.mentions:
            cluster_id = gold_cluster.get(mention.mention_id)
            if cluster_id is not None:
                spans.setdefault((passage.id, mention.start, mention.end), mention.mention_id)
                gold.append((passage.split, mention.mention_id, cluster_id))
    if split is None:
        split = ALL_PASSAGES if splits_seen <= {None} else "test"
    key = {GOLD_PREFIX + mention_id: cluster_id for passage_split, mention_id, cluster_id in gold
           if split in (ALL_PASSAGES, passage_split)}
    if split != ALL_PASSAGES and splits_seen <= {None}:
        raise InputError(f"{dataset.passages_path}: no passage records a split (a dataset of plain documents, or "
                         f"one split by clusters), so --split {split} selects none; score with --split all")
    if not key:
        raise InputError(f"the dataset {dataset.root} has no gold mention in the passages of the {split} split "
                         "(clusters.jsonl lists none of theirs); choose another --split")
    response: dict[str, str] = {}
    twin_of: dict[str, str] = {}  # gold mention -> the response mention matched to it
    other_split: list[str] = []
    repeated: list[str] = []
    for line in lines:
        where = f"{path}:{line.line}: mention {line.mention_id}"
        if line.passage_id not in passages:
            raise InputError(f"{where}: passage {line.passage_id!r} is not in the dataset ({dataset.passages_path} "
                             "has no such passage)")
        doc_id, passage_split, length = passages[line.passage_id]
        if line.doc_id is not None and line.doc_id != doc_id:
            raise InputError(f"{where}: names document {line.doc_id}, but passage {line.passage_id} is of {doc_id}")
        if line.end > length:
            raise InputError(f"{where}: offsets [{line.start}, {line.end}) do not fit passage {line.passage_id} "
                             f"({length} characters)")
        if split not in (ALL_PASSAGES, passage_split):
            other_split.append(line.mention_id)
            continue
        twin = spans.get((line.passage_id, line.start, line.end))
        if twin is not None and twin in twin_of:
            repeated.append(f"{line.mention_id} (the span of {twin_of[twin]})")
            twin = None
        if twin is not None:
            twin_of[twin] = line.mention_id
            response[GOLD_PREFIX + twin] = line.cluster_id
        else:
            response[PREDICTED_PREFIX + line.mention_id] = line.cluster_id
    if not response:
        raise InputError(f"{path} has no mention in a passage of the {split} split ({len(other_split):,} in "
                         "passages of other splits); choose the split with --split")
    warnings = []
    if other_split:
        warnings.append(f"{len(other_split):,} mention(s) in passages of other splits than {split} ignored "
                        f"(e.g. {other_split[0]})")
    if repeated:
        warnings.append(f"{len(repeated):,} mention(s) repeat the span of a mention already matched to a gold one "
                        f"(e.g. {repeated[0]}; overlapping passages?): each counts as twinless")
    return PredictedMatch(key, response, len(twin_of), detector, split, warnings)
