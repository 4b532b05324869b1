"""Whether the corpus judged a hit of a dataset query: relevant, not relevant, or unjudged.

``query --dataset --qid`` (and ``/search`` with ``qid``) says ``relevant: true`` for a hit its
qrels hold with relevance > 0 and ``relevant: false`` for every other hit, as trec_eval scores a
run. But a passage the corpus never annotated is not known to be irrelevant: a distractor, or a
document added to the dataset without mentions, may well mention the query's event. The page
must not call such a passage "not relevant", so the server adds a ``judgement`` to each hit:

1. The qrels hold the (query, passage) pair: relevance > 0 is ``relevant``; -1 is ``unjudged``
   (trec_eval's mark of an unjudged pair, see ``corefsearch.io.trec.read_qrels``); any other value
   (0 and below) is ``not_relevant``.
2. The qrels do not hold it (the datasets ``build-dataset`` writes list relevant pairs only): a
   passage of a document the corpus annotated (a document with at least one gold mention, of any
   cluster) is ``not_relevant``: its annotators read the document and marked no mention of the
   query's cluster in that passage. Any other passage, of a document without a single gold
   mention, is ``unjudged``.

The document is the unit of annotation here, as it is of the corpora corefsearch reads (ECB+,
WEC, CoreSearch, the generic format): a passage without mentions of an annotated document is
judged, one of a document without any is not. A document whose only mentions were left out of
the dataset (e.g. ECB+'s singletons, which the default ``cross-document`` chains drop) has no
gold mention left and counts as unannotated: "unjudged" errs on the side of saying less.

The passages with gold mentions come from the dataset's ``clusters.jsonl`` (every cluster lists
the passages holding its mentions), read once and again when it changes; the passages of a hit's
document from the engine (``SearchEngine.passage``), hit by hit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from corefsearch.base.errors import InputError
from corefsearch.io.read import read_jsonl
from corefsearch.io.trec import read_qrels
from corefsearch.serve.models import Judgement

UNJUDGED_RELEVANCE = -1


def judgement_of(relevance: int | None, annotated_document: bool) -> Judgement:
    """The judgement of one hit: ``relevance`` is the qrels' value for the pair (None: not in
    the qrels); ``annotated_document``: the hit's document holds at least one gold mention."""
    if relevance is not None:
        if relevance > 0:
            return "relevant"
        return "unjudged" if relevance == UNJUDGED_RELEVANCE else "not_relevant"
    return "not_relevant" if annotated_document else "unjudged"


class Judge:
    """The judgements of the hits of a dataset's queries (see the module).

    ``document_of(passage_id)``: the ids of every passage of that passage's document. Files are
    read at the first question and again when they change; safe to call from several threads."""

    def __init__(self, dataset: Path, document_of: Callable[[str], list[str]]) -> None:
        self.dataset = Path(dataset)
        self.document_of = document_of
        self._lock = threading.Lock()
        self._annotated: tuple[tuple[int, int] | None, frozenset[str]] = (None, frozenset())
        self._qrels: dict[str, tuple[tuple[int, int], dict[str, dict[str, int]]]] = {}

    def judge(self, qid: str, split: str, passage_ids: Iterable[str]) -> dict[str, Judgement]:
        """``{passage id: judgement}`` for the hits ``passage_ids`` of the query ``qid`` of ``split``."""
        judged = self._split_qrels(split).get(qid, {})
        annotated = self._annotated_passages()
        found: dict[str, Judgement] = {}
        for passage_id in passage_ids:
            relevance = judged.get(passage_id)
            # The document lookup is needed only for a pair the qrels leave out.
            in_annotated = relevance is None and (
                passage_id in annotated or any(other in annotated for other in self.document_of(passage_id)))
            found[passage_id] = judgement_of(relevance, in_annotated)
        return found

    def _split_qrels(self, split: str) -> dict[str, dict[str, int]]:
        path = self.dataset / "qrels" / f"{split}.txt"
        stamp = _stamp(path)
        if stamp is None:
            return {}
        with self._lock:
            cached = self._qrels.get(split)
            if cached is None or cached[0] != stamp:
                cached = (stamp, read_qrels(path))
                self._qrels[split] = cached
            return cached[1]

    def _annotated_passages(self) -> frozenset[str]:
        path = self.dataset / "clusters.jsonl"
        stamp = _stamp(path)
        if stamp is None:
            raise InputError(f"{path} is gone: the dataset's clusters list the passages its corpus annotated, "
                             "which the page's judgements need")
        with self._lock:
            if self._annotated[0] != stamp:
                passages: set[str] = set()
                for line_number, record in read_jsonl(path):
                    ids = record.get("passage_ids")
                    if not isinstance(ids, list) or not all(isinstance(item, str) for item in ids):
                        raise InputError(f"{path}:{line_number}: a cluster needs `passage_ids`, a list of passage "
                                         "ids")
                    passages.update(ids)
                self._annotated = (stamp, frozenset(passages))
            return self._annotated[1]


def _stamp(path: Path) -> tuple[int, int] | None:
    """Size and modification time of ``path`` (None when it is missing): a file changed when it changes."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return stat.st_size, stat.st_mtime_ns
