"""Record types shared by every stage, and their validation.

Source converters (``corefsearch.datasets.*``) produce :class:`Document` records that carry
their :class:`Mention` s with character offsets into the document text; ``build`` turns them
into :class:`Passage`, :class:`Query` and :class:`Cluster` records, which are what the
dataset directory holds (see README, "File formats").
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from corefsearch.base.errors import InputError

MENTION_TYPES = ("event", "entity")
SPLITS = ("train", "dev", "test")

_WHITESPACE = re.compile(r"\s+")


def safe_id(raw: object) -> str:
    """An identifier usable in TREC run and qrels files (which split on whitespace)."""
    text = _WHITESPACE.sub("_", str(raw).strip())
    if not text:
        raise InputError(f"empty identifier {raw!r}")
    return text


_REQUIRED: Any = object()


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class RecordFields:
    """Strict, typed reads of the fields of one JSON record, for every JSONL and JSON reader.

    Errors are one line: ``WHERE: SUBJECT: field 'x' must be an integer, got '5'`` (``where`` is
    ``FILE:LINE``, ``subject`` names the record once its id is known, e.g. ``query q7``). Nothing is
    converted: ``"5"`` is not 5 and ``true`` is not an integer (``bool`` is an ``int`` in Python).
    For an optional field, ``null`` is the same as leaving the field out.
    """

    __slots__ = ("record", "subject", "where")

    def __init__(self, record: dict[str, Any], where: str = "", subject: str = "") -> None:
        self.record = record
        self.where = where
        self.subject = subject

    def _head(self) -> str:
        return f"{self.where}: " if self.where else ""

    def error(self, why: str) -> InputError:
        """An error about the record: ``WHERE: SUBJECT: why``."""
        return InputError(f"{self._head()}{self.subject + ': ' if self.subject else ''}{why}")

    def _value(self, name: str, default: Any) -> Any:
        value = self.record.get(name)
        if value is None:
            if default is _REQUIRED:
                if name in self.record:
                    return None  # the type check names it: "must be an integer, got None"
                raise InputError(f"{self._head()}{self.subject + ' ' if self.subject else ''}"
                                 f"lacks the field {name!r}")
            return default
        return value

    def _wrong(self, name: str, expected: str, value: Any) -> InputError:
        return self.error(f"field {name!r} must be {expected}, got {_shown(value)}")

    def ident(self, name: str, default: Any = _REQUIRED) -> str:
        """An identifier: a non-empty string or an integer, as a string."""
        value = self._value(name, default)
        if value is default:
            return value  # type: ignore[no-any-return]
        if isinstance(value, bool) or not isinstance(value, (str, int)) or not str(value).strip():
            raise self._wrong(name, "a non-empty string or integer", value)
        return str(value)

    def string(self, name: str, default: Any = _REQUIRED) -> str:
        value = self._value(name, default)
        if not isinstance(value, str):
            raise self._wrong(name, "a string", value)
        return value

    def integer(self, name: str, default: Any = _REQUIRED) -> int:
        value = self._value(name, default)
        if value is default:
            return value  # type: ignore[no-any-return]
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._wrong(name, "an integer", value)
        return value

    def array(self, name: str, default: Any = _REQUIRED) -> list[Any]:
        value = self._value(name, default)
        if not isinstance(value, list):
            raise self._wrong(name, "a list", value)
        return value

    def choice(self, name: str, choices: tuple[str, ...], default: Any = _REQUIRED) -> Any:
        """One of ``choices`` (or ``default``, which may be ``None``)."""
        value = self._value(name, default)
        if value is default:
            return value
        if value not in choices:
            raise self.error(f"{name} must be one of {', '.join(choices)}, got {_shown(value)}")
        return value

    def objects(self, name: str) -> list[RecordFields]:
        """A list of JSON objects (default: empty), each as fields whose errors name its place."""
        items = self.array(name, [])
        for position, item in enumerate(items):
            if not isinstance(item, dict):
                raise self.error(f"{name}[{position}] must be a JSON object, got {_shown(item)}")
        subject = f"{self.subject}: " if self.subject else ""
        return [RecordFields(item, self.where, f"{subject}{name}[{position}]") for position, item in enumerate(items)]


@dataclass
class Mention:
    """A mention with character offsets (``end`` exclusive) into its document's text."""

    mention_id: str
    doc_id: str
    start: int
    end: int
    cluster_id: str
    type: str = "event"

    def validate(self, text: str, where: str = "") -> None:
        prefix = f"{where}: " if where else ""
        if self.type not in MENTION_TYPES:
            raise InputError(f"{prefix}mention {self.mention_id}: type must be one of {MENTION_TYPES}, "
                             f"got {self.type!r}")
        if not (0 <= self.start < self.end <= len(text)):
            raise InputError(
                f"{prefix}mention {self.mention_id}: offsets [{self.start}, {self.end}) do not fit "
                f"document {self.doc_id} of {len(text)} characters")
        if not text[self.start:self.end].strip():
            raise InputError(f"{prefix}mention {self.mention_id}: offsets [{self.start}, {self.end}) "
                             f"cover only white space in document {self.doc_id}")


@dataclass
class Document:
    """A source document, cut into the units passages are made of.

    ``units`` are character spans ``(start, end)`` of the document's sentences (or, for
    corpora that come as paragraphs, such as WEC, of its paragraphs), in order. ``split``
    is set by sources with a fixed split (ECB+ topics, CoreSearch files); ``None`` lets
    ``build`` split the clusters by a seeded shuffle.
    """

    doc_id: str
    text: str
    title: str = ""
    units: list[tuple[int, int]] = field(default_factory=list)
    mentions: list[Mention] = field(default_factory=list)
    split: str | None = None
    # The document's topic (ECB+: the number its file name starts with; the generic format: the
    # optional ``topic`` of its corpus line); ``None`` when the source has none.
    topic: str | None = None

    def validate(self, where: str = "") -> None:
        prefix = f"{where}: " if where else ""
        previous_end = 0
        for start, end in self.units:
            if not (0 <= start <= end <= len(self.text)):
                raise InputError(f"{prefix}document {self.doc_id}: unit [{start}, {end}) outside the text")
            if start < previous_end:
                raise InputError(f"{prefix}document {self.doc_id}: units must be in text order without overlap, "
                                 f"[{start}, {end}) starts before {previous_end}")
            previous_end = end
        for mention in self.mentions:
            mention.validate(self.text, where)
        if self.split is not None and self.split not in SPLITS:
            raise InputError(f"{prefix}document {self.doc_id}: unknown split {self.split!r}")


@dataclass
class PassageMention:
    mention_id: str
    start: int
    end: int
    cluster_id: str
    type: str = "event"


@dataclass
class Passage:
    id: str
    doc_id: str
    title: str
    text: str
    mentions: list[PassageMention] = field(default_factory=list)
    # The split of the passage's document, for sources with a fixed split (ECB+ topics,
    # CoreSearch files); None for distractors and cluster-split corpora.
    split: str | None = None
    # The topic of the passage's document (ECB+, or the generic format's optional ``topic``); None
    # when the source has none, and then left out of the record (datasets built before it existed
    # have none either).
    topic: str | None = None

    def to_json(self) -> dict[str, Any]:
        record = asdict(self)
        if self.topic is None:
            del record["topic"]
        return record

    @classmethod
    def from_json(cls, record: dict[str, Any], where: str = "") -> Passage:
        """A passage from its JSON record, every field checked (``where``, e.g. ``FILE:LINE``,
        starts each error)."""
        fields = RecordFields(record, where)
        passage_id = fields.ident("id")
        fields.subject = f"passage {passage_id}"
        doc_id = fields.ident("doc_id", passage_id)
        title = fields.string("title", "")
        text = fields.string("text")
        mentions = []
        for entry in fields.objects("mentions"):
            mention_id = entry.ident("mention_id")
            entry.subject = f"passage {passage_id}: mention {mention_id}"
            mentions.append(PassageMention(mention_id, entry.integer("start"), entry.integer("end"),
                                           entry.ident("cluster_id"), entry.choice("type", MENTION_TYPES, "event")))
        split = fields.choice("split", SPLITS, None)
        topic = fields.ident("topic", None)
        for m in mentions:
            if not (0 <= m.start < m.end <= len(text)):
                raise fields.error(f"mention {m.mention_id} offsets [{m.start}, {m.end}) do not fit the text")
        return cls(id=passage_id, doc_id=doc_id, title=title, text=text, mentions=mentions, split=split,
                   topic=topic)


@dataclass
class PredictedMention:
    """A mention found by a detector (``corefsearch detect``), never a gold one: offsets into the text
    of its passage (``end`` exclusive), its type, the detector's score and the text it slices. Kept in
    ``DATASET/predicted_mentions.jsonl``, apart from the gold mentions of ``passages.jsonl``."""

    mention_id: str
    passage_id: str
    doc_id: str
    start: int
    end: int
    type: str
    score: float
    text: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, record: dict[str, Any], where: str = "") -> PredictedMention:
        fields = RecordFields(record, where)
        mention_id = fields.ident("mention_id")
        fields.subject = f"predicted mention {mention_id}"
        start, end = fields.integer("start"), fields.integer("end")
        if not 0 <= start < end:
            raise fields.error(f"offsets [{start}, {end}) are not a non-empty span (end is exclusive)")
        score = record.get("score", 1.0)
        if isinstance(score, bool) or not isinstance(score, (int, float)):
            raise fields.error(f"field 'score' must be a number, got {_shown(score)}")
        return cls(mention_id, fields.ident("passage_id"), fields.ident("doc_id"), start, end,
                   fields.choice("type", MENTION_TYPES), float(score), fields.string("text"))


@dataclass
class Query:
    """A query: one mention, marked by character offsets in the text of its own passage."""

    id: str
    passage_id: str
    text: str
    start: int
    end: int
    mention: str
    cluster_id: str
    type: str = "event"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, record: dict[str, Any], where: str = "") -> Query:
        """A query from its JSON record, every field checked (``where``, e.g. ``FILE:LINE``,
        starts each error)."""
        fields = RecordFields(record, where)
        query_id = fields.ident("id")
        fields.subject = f"query {query_id}"
        query = cls(id=query_id, passage_id=fields.ident("passage_id", ""), text=fields.string("text"),
                    start=fields.integer("start"), end=fields.integer("end"), mention=fields.string("mention", ""),
                    cluster_id=fields.ident("cluster_id", ""), type=fields.choice("type", MENTION_TYPES, "event"))
        if not (0 <= query.start < query.end <= len(query.text)):
            raise fields.error(f"offsets [{query.start}, {query.end}) do not fit its text")
        actual = query.text[query.start:query.end]
        if query.mention and actual != query.mention:
            raise fields.error(f"text[{query.start}:{query.end}] is {actual!r}, not the mention {query.mention!r}")
        if not query.mention:
            query.mention = actual
        return query


@dataclass
class Cluster:
    """One line of a dataset's ``clusters.jsonl``: a gold cluster, its split, and its mentions' passages."""

    cluster_id: str
    split: str
    type: str
    mention_ids: list[str]
    passage_ids: list[str]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, record: Any, where: str) -> Cluster:
        fields = RecordFields(record, where)
        cluster_id = fields.ident("cluster_id")
        fields.subject = f"cluster {cluster_id}"
        split = fields.choice("split", SPLITS)
        kind = fields.choice("type", MENTION_TYPES, "event")
        mention_ids = []
        for position, value in enumerate(fields.array("mention_ids")):
            if isinstance(value, bool) or not isinstance(value, (str, int)) or not str(value).strip():
                raise fields.error(f"mention_ids[{position}] must be a non-empty string or integer, got {value!r}")
            mention_ids.append(str(value))
        passage_ids = [str(value) for value in record.get("passage_ids", [])] \
            if isinstance(record.get("passage_ids", []), list) else []
        return cls(cluster_id, split, kind, mention_ids, passage_ids)


@dataclass
class Hit:
    """One retrieved passage of a query: its id and the retriever's (or reader's) score."""

    passage_id: str
    score: float


@dataclass(frozen=True)
class SpanRecord:
    """One line of a reader's spans file ``RUN.spans.jsonl``: the span the reader marks in a
    retrieved passage (character offsets into its text, ``end`` exclusive) and the reader's score.
    ``corefsearch.evaluate.spans.read_spans`` reads these lines back (and checks them)."""

    qid: str
    passage_id: str
    start: int
    end: int
    text: str
    score: float

    def to_json(self) -> dict[str, Any]:
        return {"qid": self.qid, "passage_id": self.passage_id, "start": self.start, "end": self.end,
                "text": self.text, "score": self.score}
