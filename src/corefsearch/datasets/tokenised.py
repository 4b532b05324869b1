"""Documents rebuilt from tokens: the shared part of the readers of tokenised corpora (``cdcr-json``,
``conll``).

Both formats give a document as sentences of tokens and each mention as the tokens it covers. The
text is rebuilt the same way for both, so that offsets map back to tokens: tokens joined by one
space, sentences by one newline, each sentence one unit. A mention runs from the start of its first
token to the end of its last (a mention with gaps between its tokens, which both formats allow,
covers the gap, as in the ECB+ reader). The title is the first sentence (the headline in news
corpora such as MEANTIME).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from corefsearch.base.schema import Document, Mention


@dataclass
class TokenMention:
    """A mention by token positions: ``(sentence index, token index)`` pairs into its document."""

    mention_id: str
    cluster_id: str
    type: str
    tokens: list[tuple[int, int]]
    where: str  # FILE:LINE or FILE: record N, for the errors about it


@dataclass
class TokenDocument:
    """A document as sentences of tokens, with its mentions, built up while a file is read."""

    doc_id: str
    sentences: list[list[str]] = field(default_factory=list)
    mentions: list[TokenMention] = field(default_factory=list)
    split: str | None = None
    topic: str | None = None

    def to_document(self) -> Document:
        """The :class:`Document`: text rebuilt from the tokens, one unit per sentence, mentions by offsets."""
        pieces: list[str] = []
        offsets: list[list[tuple[int, int]]] = []
        units: list[tuple[int, int]] = []
        position = 0
        for number, words in enumerate(self.sentences):
            if number:
                pieces.append("\n")
                position += 1
            start = position
            spans = []
            for index, word in enumerate(words):
                if index:
                    pieces.append(" ")
                    position += 1
                spans.append((position, position + len(word)))
                pieces.append(word)
                position += len(word)
            offsets.append(spans)
            units.append((start, position))
        text = "".join(pieces)
        mentions = []
        for token_mention in self.mentions:
            spans = [offsets[sentence][token] for sentence, token in token_mention.tokens]
            mention = Mention(mention_id=token_mention.mention_id, doc_id=self.doc_id,
                              start=min(start for start, _ in spans), end=max(end for _, end in spans),
                              cluster_id=token_mention.cluster_id, type=token_mention.type)
            mention.validate(text, token_mention.where)
            mentions.append(mention)
        mentions.sort(key=lambda m: (m.start, m.end, m.mention_id))
        title = text[units[0][0]:units[0][1]] if units else ""
        return Document(doc_id=self.doc_id, text=text, title=title, units=units, mentions=mentions,
                        split=self.split, topic=self.topic)
