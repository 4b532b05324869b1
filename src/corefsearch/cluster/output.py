"""Writing a clustering: ``{mention_id, cluster_id}`` JSONL (predicted mentions add ``passage_id``,
``doc_id``, ``start``, ``end`` and ``detector``, so a scorer finds each span), and the CoNLL file of the
reference scorer.

The CoNLL file follows the convention of cross-document coreference on ECB+ (Barhom et al. 2019,
Cattan et al. 2021): the whole split is one pseudo-document, here named :data:`CONLL_DOCUMENT`,
with one line per mention (not per token)::

    #begin document (all); part 000
    all	0	0	36_1ecb_m12	(1)
    all	0	1	36_1ecb_m13	(2)
    ...
    #end document

Columns, tab-separated: document name, part number (0), line number, the mention id (in the token
column) and the cluster as ``(N)``, ``N`` numbering the clusters from 1 in the order they first
occur. Lines are sorted by mention id, so a key and a response over the same mentions line up line
by line, which the reference scorer (v8) requires.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from corefsearch.io.write import atomic_file, write_jsonl

CONLL_DOCUMENT = "all"


def write_clusters(path: Path, assignment: Mapping[str, str],
                   extra: Mapping[str, Mapping[str, Any]] | None = None) -> int:
    """Write ``{"mention_id", "cluster_id"}`` lines, sorted by mention id, atomically; return how many.
    ``extra``: fields each mention's line adds after those two (predicted mentions: where the mention is)."""
    return write_jsonl(path, ({"mention_id": mention_id, "cluster_id": assignment[mention_id],
                               **(extra[mention_id] if extra is not None else {})}
                              for mention_id in sorted(assignment)))


def conll_lines(assignment: Mapping[str, str], document: str = CONLL_DOCUMENT) -> Iterator[str]:
    """The lines of the CoNLL file of ``assignment`` (``{mention_id: cluster_id}``), each ending in a newline."""
    numbers: dict[str, int] = {}
    yield f"#begin document ({document}); part 000\n"
    for index, mention_id in enumerate(sorted(assignment)):
        number = numbers.setdefault(assignment[mention_id], len(numbers) + 1)
        yield f"{document}\t0\t{index}\t{mention_id}\t({number})\n"
    yield "#end document\n"


def write_conll(path: Path, assignment: Mapping[str, str], document: str = CONLL_DOCUMENT) -> None:
    """Write the CoNLL file of ``assignment`` atomically."""
    with atomic_file(path) as handle:
        handle.writelines(conll_lines(assignment, document))
