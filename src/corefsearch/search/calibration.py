"""The second round's top 10 ordered by a model calibrated on the collection, without gold (``--expand-order
calibrated``).

In the top 10 the second round is a re-ranking: the fixed gate moves every passage whose mention passes it above
every one that does not. How much passing says differs by collection (a passing passage is 1.4 to 4 times as often
relevant as one that does not, and how often the first round's top is right differs as much), so no fixed gate
carries from ECB+ to MEANTIME or WEC-Eng (bench/RESULTS.md, "The second round's top 10 is a re-ranking"). This
model weighs the gate against the first round's rank by how much each says *in this collection*:

- a passage at first-round rank r is relevant with prior σ(α − β·log r), and passes the gate with probability a
  if relevant, b if not; α, β, a and b are fitted by EM to the top 10 of a set of queries of the collection, with
  no gold: :func:`fit`. ``corefsearch calibrate`` draws those queries from the collection's own detected mentions
  (:func:`pseudo_queries`), what a collection of plain documents offers;
- the top 10 is ordered by each passage's posterior P(relevant | r, gate) (:meth:`HeadCalibration.order`);
- where the gate seldom passes the first round's top passage (the *top pass rate* under ``floor``, 0.4), the gate
  does not measure what the first round ranks first, and one binary signal cannot tell a weak first round from a
  weak gate; the top 10 then keeps the first round's order (the searches still fill the ranks below).

Written by hand: a four-parameter latent model with a logistic prior, which no well-kept library fits.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from corefsearch.base.errors import InputError
from corefsearch.base.schema import Query
from corefsearch.io.write import atomic_file

RANKS = 10  # the head the model orders: the first round's top 10
TOP_PASS_FLOOR = 0.4  # under it the head keeps the first round's order (module docstring)
CALIBRATION_FILE = "second-round-calibration.json"  # its default place, in the index folder
FORMAT = 1


def _prior_at(alpha: float, beta: float, rank: int) -> float:
    """The relevance prior of a first-round rank (1-based), σ(α − β·log r)."""
    return 1 / (1 + math.exp(-(alpha - beta * math.log(rank))))


def _prior(alpha: float, beta: float, ranks: int = RANKS) -> list[float]:
    """The relevance prior of ranks 1 to ``ranks``."""
    return [_prior_at(alpha, beta, r) for r in range(1, ranks + 1)]


@dataclass(frozen=True)
class HeadCalibration:
    """A fitted model (module docstring), with what it was fitted on."""

    alpha: float
    beta: float
    a: float  # P(passes the gate | relevant)
    b: float  # P(passes the gate | not relevant)
    top_pass_rate: float  # the share of the queries whose first-round top passage passes the gate
    queries: int
    gate: float  # the cosine the gate is (--expand-min-similarity)
    floor: float = TOP_PASS_FLOOR
    fitted_on: dict[str, Any] = field(default_factory=dict)  # what the queries were, the retriever, the encoder

    @property
    def applies(self) -> bool:
        """Whether the head is re-ordered at all (the top pass rate reaches the floor)."""
        return self.top_pass_rate >= self.floor

    def posterior(self, rank: int, passes: bool) -> float:
        """P(relevant | first-round rank ``rank`` (1-based), the gate's outcome)."""
        prior = _prior_at(self.alpha, self.beta, max(rank, 1))
        yes = (self.a if passes else 1 - self.a) * prior
        no = (self.b if passes else 1 - self.b) * (1 - prior)
        return yes / (yes + no) if yes + no > 0 else 0.0

    def order(self, passes: Sequence[bool]) -> list[tuple[int, float]]:
        """The head's new order: ``(index into the first round's top, score)``, best first; the first round's order
        (and its rank as the score, descending) where the calibration does not apply. Ties keep the first round's
        order."""
        if not self.applies:
            return [(i, float(len(passes) - i)) for i in range(len(passes))]
        scored = [(i, self.posterior(i + 1, bool(p))) for i, p in enumerate(passes)]
        return sorted(scored, key=lambda pair: (-pair[1], pair[0]))

    def describe(self) -> dict[str, Any]:
        """What ``RUN.meta.json`` and ``serve``'s description record of it."""
        return {"top_pass_rate": round(self.top_pass_rate, 4), "floor": self.floor, "applies": self.applies,
                "prior_rank_1": round(_prior_at(self.alpha, self.beta, 1), 4),
                "prior_rank_10": round(_prior_at(self.alpha, self.beta, RANKS), 4),
                "a": round(self.a, 4), "b": round(self.b, 4), "queries": self.queries, "gate": self.gate}

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, **asdict(self)}

    @classmethod
    def load(cls, path: Path) -> HeadCalibration:
        """Read a calibration file (``corefsearch calibrate``), every field checked; a one-line error naming the file
        otherwise."""
        if not path.is_file():
            raise InputError(f"{path}: no second-round calibration there; make one with `corefsearch calibrate "
                             "INDEX` (or give --expand-calibration FILE)")
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise InputError(f"{path}: not a calibration file ({error})") from None
        if not isinstance(record, dict) or record.get("format") != FORMAT:
            raise InputError(f"{path}: not a calibration file of format {FORMAT} (remake it: corefsearch calibrate)")
        try:
            values = {name: float(record[name]) for name in ("alpha", "beta", "a", "b", "top_pass_rate", "gate",
                                                              "floor")}
            queries = int(record["queries"])
        except (KeyError, TypeError, ValueError) as error:
            raise InputError(f"{path}: a field is missing or not a number ({error})") from None
        if not all(math.isfinite(v) for v in values.values()) or not (0 <= values["a"] <= 1 and 0 <= values["b"] <= 1):
            raise InputError(f"{path}: a field is out of range (a and b are probabilities)")
        return cls(**values, queries=queries, fitted_on=dict(record.get("fitted_on") or {}))


def resolve_order(expansion: Any, index: Path | str | None) -> None:
    """An ``ExpansionOptions``' order worked out and checked (in place), before anything loads: ``auto`` becomes
    ``calibrated`` where the index holds a calibration for its gate (else ``gate``); ``calibrated`` needs the mention
    encoder's gate to order by and a calibration file that reads (default: the index's own)."""
    if expansion is None or not expansion.active:
        return
    given = expansion.calibration is not None
    path = Path(expansion.calibration) if given else Path(index) / CALIBRATION_FILE if index is not None else None
    found = None
    if expansion.order == "auto":  # calibrated where a calibration for this gate is given or held by the index
        held = (given or (path is not None and path.is_file())) and expansion.source == "encoder" and expansion.head > 0
        found = HeadCalibration.load(path) if held and path is not None else None
        expansion.order = "calibrated" if given or (found is not None and _same_gate(found, expansion)) else "gate"
    if expansion.order != "calibrated":
        return
    if expansion.source == "reader":
        raise InputError("--expand-order calibrated orders the top passages by the mention encoder's gate: it "
                         "needs --candidates detected|gold, not the reader's spans")
    if path is None:
        return
    expansion.calibration = path
    found = found or HeadCalibration.load(path)
    if not _same_gate(found, expansion):
        raise InputError(f"{path}: calibrated for the gate {found.gate:g}, but --expand-min-similarity is "
                         f"{expansion.min_similarity:g}; calibrate again with it")


def _same_gate(found: HeadCalibration, expansion: Any) -> bool:
    return expansion.min_similarity is None or abs(found.gate - expansion.min_similarity) <= 1e-9


def _fit_prior(alpha: float, beta: float, target: Sequence[float]) -> tuple[float, float]:
    """α and β moved towards the per-rank posteriors ``target`` (gradient steps of a least-squares fit)."""
    logs = [math.log(r) for r in range(1, RANKS + 1)]
    for _ in range(50):
        miss = [t - p for t, p in zip(target, _prior(alpha, beta), strict=True)]
        alpha, beta = alpha + 0.2 * sum(miss), beta - 0.2 * sum(m * x for m, x in zip(miss, logs, strict=True))
    return alpha, beta


def fit(passes: Sequence[Sequence[bool]], gate: float, iterations: int = 300, floor: float = TOP_PASS_FLOOR,
        fitted_on: dict[str, Any] | None = None) -> HeadCalibration:
    """The model fitted by EM to each query's top 10 (``passes[q][r]``: whether the passage at rank r+1 passes the
    gate; a passage without a candidate mention does not). A query with fewer than 10 passages counts its missing
    ranks as not passing."""
    import numpy as np

    if not passes:
        raise InputError("no query to calibrate on: the collection gave no first-round passages")
    g = np.array([[1.0 if p else 0.0 for p in row[:RANKS]] + [0.0] * (RANKS - len(row[:RANKS])) for row in passes])
    alpha, beta, a, b = 0.0, 1.0, 0.7, 0.3  # a start that reads "higher ranks and passing are both better"
    for _ in range(iterations):
        prior = np.array(_prior(alpha, beta))
        yes = np.where(g > 0, a, 1 - a) * prior
        no = np.where(g > 0, b, 1 - b) * (1 - prior)
        post = yes / (yes + no)
        a, b = float((post * g).sum() / post.sum()), float(((1 - post) * g).sum() / (1 - post).sum())
        alpha, beta = _fit_prior(alpha, beta, list(post.mean(0)))
    rate = sum(1 for row in passes if row and row[0]) / len(passes)
    return HeadCalibration(float(alpha), float(beta), a, b, rate, len(passes), gate, floor, dict(fitted_on or {}))


def pseudo_queries(passages: Sequence[tuple[str, str]], mentions: Sequence[Any], n: int, mention_type: str,
                   seed: int = 13) -> list[Query]:
    """``n`` of the collection's detected mentions (``mentions``: records with ``mention_id``, ``passage_id``,
    ``start``, ``end``, ``type``) of ``mention_type`` as queries, a seeded sample; ``passages``: ``(id, text)``.
    Each query's id is its mention's, so that the mention itself is never its own candidate."""
    texts = dict(passages)
    pool = [m for m in mentions if m.type == mention_type and m.passage_id in texts]
    if not pool:
        raise InputError(f"the collection has no detected {mention_type} mention to calibrate on: run `corefsearch "
                         "detect` on its dataset first")
    chosen = random.Random(seed).sample(pool, min(n, len(pool)))
    return [Query(m.mention_id, m.passage_id, texts[m.passage_id], m.start, m.end,
                  texts[m.passage_id][m.start:m.end], "", mention_type) for m in chosen]


def save(calibration: HeadCalibration, path: Path) -> None:
    """Write ``calibration`` to ``path`` whole or not at all."""
    with atomic_file(path) as out:
        out.write(json.dumps(calibration.to_json(), indent=2) + "\n")
