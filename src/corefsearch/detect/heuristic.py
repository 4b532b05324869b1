"""The ``heuristic`` detector: mentions from spaCy's parse, with no training. The floor every trained
detector is compared with (bench/RESULTS.md, "Predicted mentions").

Events: every verb (not an auxiliary) and every eventive noun: a noun whose lemma is in
:data:`EVENT_NOUNS` (the event nouns of news: attacks, disasters, deals, trials) or ends like a
nominalised verb (-tion, -sion, -ment, -ing, -ure, -al, -ance, -ence as in "arrival"). Each is one token,
as event triggers are annotated. Entities: named entities (dates and numbers left out, a leading "the"
too), and the head noun or pronoun of every other noun phrase (``entity_extent="head"``) or the phrase
without its determiner (``"phrase"``); dev chose the head.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from corefsearch.base.errors import InputError
from corefsearch.base.nlp import parses

EVENT_NOUNS = frozenset({
    "abduction", "accident", "acquisition", "agreement", "announcement", "appeal", "appointment", "arrest",
    "assault", "attack", "award", "bankruptcy", "battle", "bid", "birth", "blast", "blaze", "bombing",
    "burglary", "campaign", "case", "ceasefire", "ceremony", "championship", "change", "charge", "clash",
    "collapse", "collision", "comeback", "concert", "conference", "conviction", "crash", "crisis", "cut",
    "deal", "death", "debut", "decline", "defeat", "disaster", "divorce", "drop", "earthquake", "election",
    "epidemic", "eruption", "escape", "evacuation", "event", "explosion", "fall", "fight", "final", "fire",
    "flood", "fraud", "funeral", "game", "growth", "hearing", "hijacking", "hurricane", "incident", "increase",
    "injury", "inquiry", "invasion", "investigation", "kidnapping", "killing", "landslide", "launch", "lawsuit",
    "layoff", "loss", "marriage", "match", "meeting", "merger", "mission", "move", "murder", "negotiation",
    "nomination", "offensive", "offer", "operation", "outbreak", "party", "performance", "poll", "probe",
    "protest", "purchase", "quake", "race", "raid", "rally", "rape", "recession", "release", "rescue",
    "resignation", "return", "riot", "rise", "robbery", "sale", "scandal", "season", "sentence", "shift",
    "shooting", "show", "storm", "strike", "suit", "summit", "surgery", "takeover", "talks", "theft", "tour",
    "tragedy", "transplant", "treaty", "trial", "trip", "truce", "tsunami", "verdict", "victory", "visit",
    "vote", "war", "wedding", "win", "wound",
})
EVENT_SUFFIXES = ("tion", "sion", "ment", "ing", "ure", "ance", "ence", "val")
ENTITY_LABELS_LEFT_OUT = frozenset({"DATE", "TIME", "PERCENT", "MONEY", "QUANTITY", "ORDINAL", "CARDINAL"})
ENTITY_EXTENTS = ("head", "phrase")
DETERMINERS = frozenset({"the", "a", "an", "this", "that", "these", "those"})


def is_eventive_noun(token: Any) -> bool:
    lemma = token.lemma_.lower()
    return lemma in EVENT_NOUNS or (len(lemma) > 5 and lemma.endswith(EVENT_SUFFIXES))


def _events(doc: Any) -> Iterator[tuple[int, int]]:
    for token in doc:
        if token.pos_ == "VERB" or (token.pos_ == "NOUN" and is_eventive_noun(token)):
            yield token.idx, token.idx + len(token.text)


def _entities(doc: Any, extent: str) -> Iterator[tuple[int, int]]:
    taken: set[int] = set()
    for ent in doc.ents:
        if ent.label_ in ENTITY_LABELS_LEFT_OUT:
            continue
        tokens = [t for t in ent if not (t.i == ent.start and t.lower_ in DETERMINERS)]
        if tokens:
            taken.update(t.i for t in ent)
            yield tokens[0].idx, tokens[-1].idx + len(tokens[-1].text)
    for chunk in doc.noun_chunks:
        root = chunk.root
        if root.i in taken or (root.pos_ == "NOUN" and is_eventive_noun(root)):
            continue
        if extent == "head":
            yield root.idx, root.idx + len(root.text)
        else:
            tokens = [t for t in chunk if not (t.i == chunk.start and t.lower_ in DETERMINERS)]
            if tokens:
                yield tokens[0].idx, tokens[-1].idx + len(tokens[-1].text)


class HeuristicDetector:
    """Mentions from spaCy's parse (see the module docstring); the same interface as the trained detector."""

    name = "heuristic"

    def __init__(self, types: Iterable[str] = ("event", "entity"), entity_extent: str = "head") -> None:
        if entity_extent not in ENTITY_EXTENTS:
            raise InputError(f"entity extent must be one of {', '.join(ENTITY_EXTENTS)}, got {entity_extent!r}")
        self.types = list(types)
        self.entity_extent = entity_extent

    def detect(self, texts: list[str], batch_size: int = 64) -> list[list[tuple[int, int, str, float]]]:
        found = []
        for group in parses(texts, batch_size=batch_size):
            spans: set[tuple[int, int, str, float]] = set()
            for doc, offset in group:
                if "event" in self.types:
                    spans.update((s + offset, e + offset, "event", 1.0) for s, e in _events(doc))
                if "entity" in self.types:
                    spans.update((s + offset, e + offset, "entity", 1.0) for s, e in _entities(doc, self.entity_extent))
            found.append(sorted(spans))
        return found
