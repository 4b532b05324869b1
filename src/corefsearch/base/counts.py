"""Counts in words: ``counted(1, "mention")`` is "1 mention", ``counted(1200, "query")`` "1,200 queries"."""

from __future__ import annotations


def plural(noun: str) -> str:
    """The English plural of the nouns the messages count (``query`` → ``queries``, ``passage`` → ``passages``)."""
    if noun.endswith("y") and noun[-2:-1] not in ("a", "e", "i", "o", "u", ""):
        return noun[:-1] + "ies"
    return noun + ("es" if noun.endswith(("s", "x", "ch", "sh")) else "s")


def counted(number: int, noun: str, plural_form: str | None = None) -> str:
    """``number`` (thousands separated) and ``noun``, in the plural unless the number is 1."""
    return f"{number:,} {noun if number == 1 else plural_form or plural(noun)}"
