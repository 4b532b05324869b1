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

from corefsearch.errors import InputError

MENTION_TYPES = ("event", "entity")
SPLITS = ("train", "dev", "test")

_WHITESPACE = re.compile(r"\s+")


def safe_id(raw: object) -> str:
    """An identifier usable in TREC run and qrels files (which split on whitespace)."""
    text = _WHITESPACE.sub("_", str(raw).strip())
    if not text:
        raise InputError(f"empty identifier {raw!r}")
    return text


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

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> Passage:
        try:
            mentions = [PassageMention(**m) for m in record.get("mentions", [])]
            passage = cls(id=str(record["id"]), doc_id=str(record.get("doc_id", record["id"])),
                          title=str(record.get("title", "")), text=str(record["text"]),
                          mentions=mentions, split=record.get("split"))
        except KeyError as missing:
            raise InputError(f"passage record lacks the field {missing}") from None
        except TypeError as bad:
            raise InputError(f"passage record {record.get('id')!r}: {bad}") from None
        for m in passage.mentions:
            if not (0 <= m.start < m.end <= len(passage.text)):
                raise InputError(f"passage {passage.id}: mention {m.mention_id} offsets "
                                 f"[{m.start}, {m.end}) do not fit the text")
        return passage


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
    def from_json(cls, record: dict[str, Any]) -> Query:
        try:
            query = cls(id=str(record["id"]), passage_id=str(record.get("passage_id", "")),
                        text=str(record["text"]), start=int(record["start"]), end=int(record["end"]),
                        mention=str(record.get("mention", "")),
                        cluster_id=str(record.get("cluster_id", "")),
                        type=str(record.get("type", "event")))
        except KeyError as missing:
            raise InputError(f"query record lacks the field {missing}") from None
        except (TypeError, ValueError) as bad:
            raise InputError(f"query record {record.get('id')!r}: {bad}") from None
        if not (0 <= query.start < query.end <= len(query.text)):
            raise InputError(f"query {query.id}: offsets [{query.start}, {query.end}) do not fit its text")
        actual = query.text[query.start:query.end]
        if query.mention and actual != query.mention:
            raise InputError(f"query {query.id}: text[{query.start}:{query.end}] is {actual!r}, "
                             f"not the mention {query.mention!r}")
        if not query.mention:
            query.mention = actual
        return query


@dataclass
class Cluster:
    cluster_id: str
    split: str
    type: str
    mention_ids: list[str]
    passage_ids: list[str]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
