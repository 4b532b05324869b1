"""The CDCR interchange format (Barhom et al. 2019 and its successors): tokens + gold-mention JSON.

A folder holds, for each split, ``{split}_text.txt`` (one token a line,
``doc_id<TAB>sentence_id<TAB>token_id<TAB>token``; blank lines are allowed between sentences) and
``{split}_event_gold_mentions.json`` / ``{split}_entity_gold_mentions.json``: a JSON list of mention
records ``{"doc_id", "sent_id", "tokens_ids", "coref_chain", "m_id"?, "tokens_str"?, "topic"?, ...}``,
``tokens_ids`` naming token ids of sentence ``sent_id``. MEANTIME, ECB+ and GVC are published this
way; so is the ``statistics`` file beside them, whose counts :func:`statistics_rows` checks.

Every mention and chain is kept (singletons and within-document chains too, as ``--chains all``
does for ECB+). The split is the file's; the topic is the ``topic`` of the document's mentions.
Documents, sentences and tokens must come in order: a document whose lines are not together, a
sentence id that comes back, or a token id not above the one before is refused, naming the line.

Facts of MEANTIME (English, as vendored in ``data/meantime``) that the reader relies on:

* token ids count within the document, not within the sentence, and mentions name them so: the
  reader looks a mention's tokens up by (document, sentence, token id), which works for both;
* one dev event mention (m_id 65 of 39951_Australian_government_...) names a token of the next
  sentence besides its own (``tokens_ids`` [49, 54], ``tokens_str`` "assistance assistance"): a
  mention keeps the tokens found in its own sentence, with one warning for all such mentions;
  a mention none of whose tokens is in its sentence is an error;
* ``statistics`` counts as "Sentences" those holding a mention (of either kind), and as
  "Singleton" the chains of one mention.
"""

from __future__ import annotations

import re
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corefsearch.base.errors import InputError
from corefsearch.base.schema import MENTION_TYPES, Document, RecordFields, safe_id
from corefsearch.datasets.tokenised import TokenDocument, TokenMention
from corefsearch.io.read import closing_iterator, read_json_array, text_lines

STATISTICS_FILE = "statistics"


def text_file(folder: Path, split: str) -> Path:
    return folder / f"{split}_text.txt"


def mentions_file(folder: Path, split: str, kind: str) -> Path:
    return folder / f"{split}_{kind}_gold_mentions.json"


@dataclass
class SplitCounts:
    """What was read of one split, counted as the corpus's ``statistics`` file counts."""

    docs: int = 0
    mention_sentences: set[tuple[str, str]] = field(default_factory=set)
    mentions: Counter[str] = field(default_factory=Counter)
    multi_token: Counter[str] = field(default_factory=Counter)
    chains: dict[str, Counter[str]] = field(default_factory=lambda: {kind: Counter() for kind in MENTION_TYPES})


@dataclass
class CdcrReport:
    """Filled while the corpus is read: the counts per split, and the kinds read."""

    kinds: tuple[str, ...] = ()
    splits: dict[str, SplitCounts] = field(default_factory=dict)


@dataclass
class _Sentence:
    number: str
    tokens: dict[int, int] = field(default_factory=dict)  # token id -> index in the sentence


@dataclass
class _TextDocument:
    document: TokenDocument
    sentences: dict[str, int] = field(default_factory=dict)  # sentence id -> index
    lookup: list[_Sentence] = field(default_factory=list)


def _read_text(path: Path, split: str) -> dict[str, _TextDocument]:
    """The documents of a ``{split}_text.txt`` file, in order, with token lookups."""
    documents: dict[str, _TextDocument] = {}
    current: _TextDocument | None = None
    last_token = -1
    with closing_iterator(text_lines(path)) as lines:
        for number, line in lines:
            line = line.rstrip("\n")
            if not line.strip():
                continue
            columns = line.split("\t")
            if len(columns) != 4:
                raise InputError(f"{path}:{number}: expected 4 tab-separated columns "
                                 f"(doc_id, sentence_id, token_id, token), got {len(columns)}")
            doc_id, sentence_id, token_id, token = (columns[0].strip(), columns[1].strip(), columns[2].strip(),
                                                    columns[3].strip())
            if not doc_id:
                raise InputError(f"{path}:{number}: empty doc_id")
            if not re.fullmatch(r"\d+", token_id):
                raise InputError(f"{path}:{number}: token id must be a non-negative integer, got {token_id!r}")
            if not sentence_id:
                raise InputError(f"{path}:{number}: empty sentence id")
            if not token:
                raise InputError(f"{path}:{number}: empty token (token id {token_id} of document {doc_id})")
            if current is None or current.document.doc_id != doc_id:
                if doc_id in documents:
                    raise InputError(f"{path}:{number}: document {doc_id} comes back after other documents; "
                                     "the lines of a document must be together")
                current = documents[doc_id] = _TextDocument(TokenDocument(doc_id, split=split))
            if not current.lookup or current.lookup[-1].number != sentence_id:
                if sentence_id in current.sentences:
                    raise InputError(f"{path}:{number}: sentence {sentence_id} of document {doc_id} comes back "
                                     "after another sentence; the lines of a sentence must be together")
                current.sentences[sentence_id] = len(current.lookup)
                current.lookup.append(_Sentence(sentence_id))
                current.document.sentences.append([])
                last_token = -1  # token ids may restart in each sentence, or count through the document
            value = int(token_id)
            if value <= last_token:
                raise InputError(f"{path}:{number}: token id {value} of document {doc_id} is out of order "
                                 f"(it follows token id {last_token} in sentence {sentence_id})")
            last_token = value
            sentence = current.lookup[-1]
            sentence.tokens[value] = len(current.document.sentences[-1])
            current.document.sentences[-1].append(token)
    if not documents:
        raise InputError(f"{path}: holds no tokens")
    return documents


def _mention(path: Path, index: int, record: Any, kind: str, documents: dict[str, _TextDocument],
             seen: dict[str, int], counts: SplitCounts,
             off_sentence: list[str]) -> tuple[str, TokenMention, str | None]:
    where = f"{path}: record {index}"
    if not isinstance(record, dict):
        raise InputError(f"{where}: expected a JSON object, got {type(record).__name__}")
    fields = RecordFields(record, where)
    doc_id = fields.ident("doc_id").strip()
    m_id = fields.ident("m_id", str(index))
    fields.subject = f"mention {m_id} of document {doc_id}"
    chain = record.get("coref_chain")
    if isinstance(chain, bool) or not isinstance(chain, (str, int)) or not str(chain).strip():
        raise fields.error(f"field 'coref_chain' must be a non-empty string or number, got {chain!r}")
    sentence_id = fields.ident("sent_id").strip()
    token_ids = fields.array("tokens_ids")
    if not token_ids or not all(isinstance(t, int) and not isinstance(t, bool) for t in token_ids):
        raise fields.error(f"field 'tokens_ids' must be a non-empty list of integers, got {token_ids!r}")
    topic = fields.ident("topic", None)
    declared = record.get("event_entity")
    if declared is not None and declared != kind:
        raise fields.error(f"field 'event_entity' is {declared!r} in a file of {kind} mentions")
    text_document = documents.get(doc_id)
    if text_document is None:
        raise fields.error(f"document {doc_id} is not in {text_file(path.parent, path.name.split('_')[0])}")
    sentence_index = text_document.sentences.get(sentence_id)
    if sentence_index is None:
        raise fields.error(f"sentence {sentence_id} is not in document {doc_id}")
    sentence = text_document.lookup[sentence_index]
    found = [(sentence_index, sentence.tokens[t]) for t in token_ids if t in sentence.tokens]
    if not found:
        raise fields.error(f"its tokens {token_ids} are not in sentence {sentence_id} of document {doc_id}")
    if len(found) < len(token_ids):
        off_sentence.append(f"{where} (tokens {[t for t in token_ids if t not in sentence.tokens]})")
    mention_id = safe_id(f"{doc_id}_{kind}_{m_id}")
    if mention_id in seen:
        raise fields.error(f"m_id {m_id} occurs twice in document {doc_id} (first in record {seen[mention_id]})")
    seen[mention_id] = index
    cluster_id = safe_id(chain)
    counts.mentions[kind] += 1
    counts.multi_token[kind] += len(token_ids) > 1
    counts.chains[kind][cluster_id] += 1
    counts.mention_sentences.add((doc_id, sentence_id))
    return doc_id, TokenMention(mention_id, cluster_id, kind, found, f"{where} (m_id {m_id})"), \
        None if topic is None else topic.strip()


def read_cdcr_json(folder: Path, splits: tuple[str, ...] = ("train", "dev", "test"), mention_type: str = "event",
                   report: CdcrReport | None = None) -> Iterator[Document]:
    """Yield the documents of ``splits`` of a CDCR-JSON folder, split by split, each in file order.

    ``mention_type``: ``event``, ``entity`` or ``all`` (the ``{split}_{kind}_gold_mentions.json``
    files read). ``report`` (optional) is filled with the counts the ``statistics`` file also gives.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"{folder}: the cdcr-json format is a folder holding {{split}}_text.txt and "
                         "{split}_event_gold_mentions.json / {split}_entity_gold_mentions.json")
    kinds = MENTION_TYPES if mention_type == "all" else (mention_type,)
    for split in splits:  # every file is looked for before any is read
        wanted = [text_file(folder, split)] + [mentions_file(folder, split, kind) for kind in kinds]
        missing = [path for path in wanted if not path.is_file()]
        if missing:
            raise InputError(f"{missing[0]}: no such file; split {split} of the cdcr-json folder needs "
                             f"{' and '.join(p.name for p in wanted)} (--splits names the splits read)")
    report = report if report is not None else CdcrReport()
    report.kinds = kinds
    off_sentence: list[str] = []
    for split in splits:
        documents = _read_text(text_file(folder, split), split)
        counts = report.splits[split] = SplitCounts(docs=len(documents))
        seen: dict[str, int] = {}
        for kind in kinds:
            path = mentions_file(folder, split, kind)
            with closing_iterator(read_json_array(path, f"{kind} mention records")) as records:
                for index, record in records:
                    doc_id, mention, topic = _mention(path, index, record, kind, documents, seen, counts,
                                                      off_sentence)
                    document = documents[doc_id].document
                    if topic is not None:
                        if document.topic is not None and document.topic != topic:
                            raise InputError(f"{mention.where}: topic {topic!r}, but document {doc_id} has "
                                             f"topic {document.topic!r} in an earlier record")
                        document.topic = topic
                    document.mentions.append(mention)
        for text_document in documents.values():
            yield text_document.document.to_document()
    if off_sentence:
        warnings.warn(f"{len(off_sentence)} mention(s) name tokens outside their own sentence, and keep only "
                      f"those in it: {off_sentence[0]}" + (" …" if len(off_sentence) > 1 else ""), stacklevel=2)


_STATISTICS_HEAD = re.compile(r"^Statistics on the (\w+) set$")
_STATISTICS_LINE = re.compile(r"^([A-Za-z][A-Za-z ]*?):\s*(\d+)$")


def read_statistics(path: Path) -> dict[str, dict[str, int]]:
    """``{split: {quantity: count}}`` of a corpus's ``statistics`` file (``Statistics on the train set``,
    then ``Docs: 60`` lines)."""
    table: dict[str, dict[str, int]] = {}
    split: str | None = None
    with closing_iterator(text_lines(path)) as lines:
        for number, line in lines:
            line = line.strip()
            if not line or set(line) == {"-"}:
                continue
            head = _STATISTICS_HEAD.match(line)
            if head is not None:
                split = head[1]
                table[split] = {}
                continue
            row = _STATISTICS_LINE.match(line)
            if row is None or split is None:
                raise InputError(f"{path}:{number}: expected 'Statistics on the SPLIT set' or 'Quantity: N', "
                                 f"got {line!r}")
            table[split][row[1]] = int(row[2])
    return table


def _counted(counts: SplitCounts, kinds: tuple[str, ...]) -> dict[str, int]:
    counted = {"Docs": counts.docs}
    if kinds == MENTION_TYPES:  # the file counts sentences with a mention of either kind
        counted["Sentences"] = len(counts.mention_sentences)
    for kind in kinds:
        name = kind.capitalize()
        counted[f"{name} mentions"] = counts.mentions[kind]
        counted[f"{name} mentions with more than one token"] = counts.multi_token[kind]
        counted[f"{name} chains"] = len(counts.chains[kind])
        counted[f"{name} Singleton"] = sum(1 for n in counts.chains[kind].values() if n == 1)
    return counted


def statistics_rows(folder: Path, report: CdcrReport) -> list[tuple[str, str, int, int | None]]:
    """``(split, quantity, read, the corpus's count or None)`` for what was read, against the
    ``statistics`` file beside the corpus; empty when there is none."""
    path = Path(folder) / STATISTICS_FILE
    if not path.is_file() or not report.splits:
        return []
    published = read_statistics(path)
    rows: list[tuple[str, str, int, int | None]] = []
    every = dict(report.splits)
    if set(every) == {"train", "dev", "test"}:  # the file's "all" set: the three together
        whole = every["all"] = SplitCounts(docs=sum(c.docs for c in report.splits.values()))
        for counts in report.splits.values():
            whole.mention_sentences |= counts.mention_sentences
            whole.mentions += counts.mentions
            whole.multi_token += counts.multi_token
            for kind in MENTION_TYPES:
                whole.chains[kind] += counts.chains[kind]
    for split, counts in every.items():
        for quantity, value in _counted(counts, report.kinds).items():
            rows.append((split, quantity, value, published.get(split, {}).get(quantity)))
    return rows

