"""The answer as a cluster on plain documents, counted against a hand annotation (bench/data/plain-events).

Builds the dataset of ``bench/data/plain-events`` (``build-dataset --format text``, sentence passages) and its
Lucene index, then asks each query of ``QUERIES`` (a mention in one of the corpus's own documents, given as
``--mention``/``--context``: the sentence it is in) for its top 10 hits as a cluster, twice: with the CLI
(``corefsearch query … --k 10 --cluster --mention-encoder M --detector D --device cpu --json``) and with the API (``POST
/search`` with ``cluster: true``, FastAPI's TestClient over ``create_app(SearchEngine.open(...))``). The two
answers' clusters are compared (``--device cpu`` in both); the page renders the API's JSON, so it shows the API's
answer.

Counting, against ``bench/data/plain-events/annotations.json`` (written before any system output was read):

- **annotated**: every hand-annotated mention of the query's event in the passages of the top 10 hits (the
  query's own sentence included when it is a hit);
- **held**: those overlapped (at least one character in common, in the same document) by a mention of the
  answer's cluster;
- **others**: the cluster's mentions (the query mention itself left out) that overlap no annotated mention of
  the query's event.

held % = held / annotated; others % = others / the cluster's mentions. The answer takes at most one mention a
hit (sentence), so **reachable** counts the hits that hold an annotated mention: held can be no larger. The
``own`` columns repeat the count with the query's own mention left out of both (it is trivially held when its
sentence is a hit).

Run: ``python bench/plain_clusters.py --out /tmp/plain-clusters [--detector heuristic] [--detector
detector-ecbplus] [--mention-encoder event-encoder-ecbplus]`` (the defaults); prints markdown tables, writes
``answers-*.json`` and ``hits-*.md`` (each hit, its annotated and clustered mentions) into ``--out``. Offline.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "bench" / "data" / "plain-events"
CLI = [str(Path(sys.executable).parent / "corefsearch")]
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}

# (query id, event, document, mention as written, its occurrence in the sentence); fixed before any run.
QUERIES = [
    ("fire-a", "fire", "fire-1", "blaze", "The blaze was reported shortly after 11pm by a security guard."),
    ("fire-b", "fire", "fire-3", "burned", "Calloway Logistics says it will take months to recover after its Dunmore "
                                           "warehouse burned to the ground this week."),
    ("bridge-a", "bridge", "bridge-1", "collapsed", "The Tenby Street bridge in Carrick collapsed into the River Lune "
                                                    "on Sunday morning."),
    ("bridge-b", "bridge", "bridge-2", "gave way", "A span of the Tenby Street bridge gave way under traffic in "
                                                   "Carrick on Sunday, sending two vehicles into the river below."),
    ("ferry-a", "ferry", "ferry-1", "strike", "Ferry crews at Westsound Ferries began a 48-hour strike on Monday in a "
                                              "dispute over pay."),
    ("ferry-b", "ferry", "ferry-2", "walked out", "Hundreds of islanders were unable to reach the mainland on Monday "
                                                  "after Westsound Ferries crews walked out."),
    ("election-a", "election", "election-1", "won", "Maria Okafor has won the race to become mayor of Port Ellis, "
                                                    "beating the sitting mayor Tom Reeve by 2,100 votes."),
    ("election-b", "election", "election-2", "victory", "Okafor's victory makes her the first woman to lead the "
                                                        "town."),
    ("recall-a", "recall", "recall-1", "recalling", "Appliance maker Brightwell is recalling 40,000 electric kettles "
                                                    "after reports that the base can overheat."),
    ("recall-b", "recall", "recall-2", "pulled", "Brightwell has pulled its KT200 kettle from shops across the "
                                                 "country because of an overheating fault."),
]


def log(message: str) -> None:
    print(f"[plain_clusters {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def command(args: list[str]) -> str:
    done = subprocess.run(args, capture_output=True, text=True, env={**os.environ, **OFFLINE}, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


def build(out: Path) -> tuple[Path, Path]:
    dataset, index = out / "dataset", out / "index"
    if not (dataset / "passages.jsonl").is_file():
        log("building the dataset")
        command([*CLI, "build-dataset", str(CORPUS), "--format", "text", "--out", str(dataset), "--overwrite"])
    if not index.is_dir():
        log("indexing")
        command([*CLI, "index", str(dataset), "--out", str(index)])
    return dataset, index


def passage_offsets(dataset: Path) -> dict[str, tuple[str, int, str]]:
    """``{passage id: (doc id, offset of the passage in its document's text, passage text)}``."""
    texts = {path.stem: path.read_text(encoding="utf-8").split("\n", 1)[1].strip() for path in CORPUS.glob("*.txt")}
    found: dict[str, tuple[str, int, str]] = {}
    cursor: dict[str, int] = {}
    with (dataset / "passages.jsonl").open(encoding="utf-8") as lines:
        for line in lines:
            record = json.loads(line)
            doc, text = record["doc_id"], record["text"]
            at = texts[doc].find(text, cursor.get(doc, 0))
            if at < 0:
                raise SystemExit(f"passage {record['id']} is not a substring of {doc}.txt's text")
            cursor[doc] = at + len(text)
            found[record["id"]] = (doc, at, text)
    return found


def ask_cli(index: Path, encoder: Path, detector: str, mention: str, context: str) -> dict:
    return json.loads(command([*CLI, "query", "--index", str(index), "--mention", mention, "--context", context,
                               "--k", "10", "--cluster", "--mention-encoder", str(encoder), "--detector", detector,
                               "--device", "cpu", "--json"]))


def api_client(index: Path, encoder: Path, detector: str):  # noqa: ANN201 - a TestClient
    os.environ.update(OFFLINE)
    from fastapi.testclient import TestClient

    from corefsearch.search.engine import SearchEngine
    from corefsearch.search.options import ExpansionOptions, RetrievalOptions, SearchOptions
    from corefsearch.serve.app import create_app

    engine = SearchEngine.open(index, SearchOptions(retrieval=RetrievalOptions(device="cpu"),
                                                    expansion=ExpansionOptions(encoder=encoder, detector=detector)))
    return TestClient(create_app(engine))


def ask_api(client, mention: str, context: str) -> dict:  # noqa: ANN001
    response = client.post("/search", json={"mention": mention, "context": context, "k": 10, "cluster": True})
    if response.status_code != 200:
        raise SystemExit(f"POST /search: {response.status_code} {response.text[:500]}")
    return response.json()


def cluster_spans(answer: dict) -> list[tuple[str, int, int, str, int]]:
    """The cluster's mentions: ``(passage id, start, end, text, rank)``."""
    return [(m["passage_id"], m["start"], m["end"], m["mention"], m["rank"])
            for document in answer["cluster"]["documents"] for m in document["mentions"]]


def detected_events(detector: str, offsets: dict[str, tuple[str, int, str]]) -> dict[str, list[tuple[int, int]]]:
    """``{passage id: [(start, end)]}``: the detector's event mentions of every passage (what the answer's
    candidates are, the encoder taking the nearest of them to the query mention in each hit)."""
    from corefsearch.detect.detectors import load_detector

    ids = list(offsets)
    found = load_detector(detector).detect([offsets[pid][2] for pid in ids], batch_size=16)
    return {pid: [(s, e) for s, e, kind, _ in spans if kind == "event"] for pid, spans in zip(ids, found, strict=True)}


def score(answer: dict, event: str, query_doc: str, query_span: tuple[int, int],
          offsets: dict[str, tuple[str, int, str]], annotations: list[dict],
          detected: dict[str, list[tuple[int, int]]]) -> tuple[dict, list[str]]:
    hits = [hit["passage_id"] for hit in answer["hits"][:10]]
    ours = [a for a in annotations if a["event"] == event]
    in_hits: list[tuple[str, dict]] = []  # (passage id, annotated mention)
    for pid in hits:
        doc, at, text = offsets[pid]
        in_hits += [(pid, a) for a in ours if a["doc_id"] == doc and at <= a["start"] and a["end"] <= at + len(text)]
    clustered = cluster_spans(answer)

    def overlaps(c: tuple, a: dict) -> bool:
        doc, at, _ = offsets[c[0]]
        return doc == a["doc_id"] and at + c[1] < a["end"] and a["start"] < at + c[2]

    held = [(pid, a) for pid, a in in_hits if any(overlaps(c, a) for c in clustered)]
    candidates = [(pid, a) for pid, a in in_hits
                  if any(overlaps((pid, s, e), a) for s, e in detected.get(pid, ()))]
    others = [c for c in clustered if not any(overlaps(c, a) for a in ours)]
    own = [(pid, a) for pid, a in in_hits if a["doc_id"] == query_doc and a["start"] < query_span[1]
           and query_span[0] < a["end"]]
    row = {"annotated": len(in_hits), "reachable": len({pid for pid, _ in in_hits}),
           "detected": len(candidates), "held": len(held),
           "cluster": len(clustered), "others": len(others), "own_hit": bool(own),
           "own_held": bool(own) and any(o in held for o in own),
           "without_candidates": answer["cluster"].get("passages_without_mentions")}
    lines = []
    for rank, pid in enumerate(hits, start=1):
        doc, at, text = offsets[pid]
        marked = [a["text"] + ("" if (p, a) in candidates else " (undetected)") for p, a in in_hits if p == pid]
        mine = [f"{c[3]!r}" + ("" if any(overlaps(c, a) for a in ours) else " ✗") for c in clustered if c[0] == pid]
        near = [f"{m['mention']!r} {m['score']:.2f}" for m in answer["cluster"]["near_misses"]
                if m["passage_id"] == pid]
        lines.append(f"| {rank} | {doc} | {text} | {', '.join(marked)} | {', '.join(mine)} | {', '.join(near)} |")
    return row, lines


def pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f} %" if whole else "–"


def table(rows: list[tuple[str, dict]]) -> list[str]:
    out = ["| query | mention | annotated | reachable | detected | held | cluster | others | held % | others % |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    total = dict.fromkeys(("annotated", "reachable", "detected", "held", "cluster", "others", "own_hit",
                           "own_held"), 0)
    for label, row in rows:
        out.append(f"| {label} | {row['mention']} | {row['annotated']} | {row['reachable']} | {row['detected']} | "
                   f"{row['held']} | "
                   f"{row['cluster']} | {row['others']} | {pct(row['held'], row['annotated'])} | "
                   f"{pct(row['others'], row['cluster'])} |")
        for key in total:
            total[key] += int(row[key])
    out.append(f"| **total** | | {total['annotated']} | {total['reachable']} | {total['detected']} | {total['held']} | "
               f"{total['cluster']} | "
               f"{total['others']} | **{pct(total['held'], total['annotated'])}** | "
               f"**{pct(total['others'], total['cluster'])}** |")
    annotated, held = total["annotated"] - total["own_hit"], total["held"] - total["own_held"]
    cluster = total["cluster"] - total["own_held"]
    out.append(f"| total, the query's own mention left out | | {annotated} | | | {held} | {cluster} | "
               f"{total['others']} | {pct(held, annotated)} | {pct(total['others'], cluster)} |")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="work folder (outside the repository, or ignored)")
    parser.add_argument("--mention-encoder", default="event-encoder-ecbplus", help="a shipped name or a folder")
    parser.add_argument("--detector", action="append", help="heuristic, a shipped detector or a detector folder; "
                        "repeatable (default: heuristic and detector-ecbplus)")
    parser.add_argument("--no-cli", action="store_true", help="the API only (the CLI loads the models per query)")
    args = parser.parse_args(argv)
    from corefsearch.base.shipped import resolve_reference

    detectors = args.detector or ["heuristic", "detector-ecbplus"]
    for reference in [args.mention_encoder, *(d for d in detectors if d != "heuristic")]:
        if not Path(resolve_reference(reference)).is_dir():
            raise SystemExit(f"{reference}: neither a shipped model nor a folder")
    args.out.mkdir(parents=True, exist_ok=True)
    annotations = json.loads((CORPUS / "annotations.json").read_text())["mentions"]
    dataset, index = build(args.out)
    offsets = passage_offsets(dataset)
    print(f"corpus: {len(list(CORPUS.glob('*.txt')))} documents, {len(offsets)} passages (sentences), "
          f"{len(annotations)} annotated mentions; mention encoder {args.mention_encoder}\n")
    for detector in detectors:
        name = Path(detector).name
        answers: dict[str, dict] = {}
        log(f"{name}: the API")
        client = api_client(index, args.mention_encoder, detector)
        for qid, _, _, mention, context in QUERIES:
            answers[f"api:{qid}"] = ask_api(client, mention, context)
        client.close()
        if not args.no_cli:
            for qid, _, _, mention, context in QUERIES:
                log(f"{name}: the CLI, {qid}")
                answers[f"cli:{qid}"] = ask_cli(index, args.mention_encoder, detector, mention, context)
        (args.out / f"answers-{name}.json").write_text(json.dumps(answers, indent=1))
        rows, details, same = [], [], []
        detected = detected_events(detector, offsets)
        for qid, event, doc, mention, context in QUERIES:
            text = next(p[2] for p in offsets.values() if p[0] == doc and p[2] == context)
            at = next(p[1] for p in offsets.values() if p[0] == doc and p[2] == text) + context.index(mention)
            row, lines = score(answers[f"api:{qid}"], event, doc, (at, at + len(mention)), offsets, annotations,
                              detected)
            rows.append((qid, {**row, "mention": mention}))
            details += [f"\n### {qid} ({mention!r}, {doc})\n", "| rank | doc | passage | annotated | in the cluster "
                        "(✗: not the event) | near misses |", "|---:|---|---|---|---|---|", *lines]
            if not args.no_cli:
                same.append(cluster_spans(answers[f"api:{qid}"]) == cluster_spans(answers[f"cli:{qid}"])
                            and [h["passage_id"] for h in answers[f"api:{qid}"]["hits"]]
                            == [h["passage_id"] for h in answers[f"cli:{qid}"]["hits"]])
        (args.out / f"hits-{name}.md").write_text("\n".join(details) + "\n")
        source = {k: answers[f"api:{QUERIES[0][0]}"]["cluster"].get(k) for k in ("candidates", "detector", "detected",
                                                                                "threshold")}
        print(f"## detector {name} ({source})\n")
        print("\n".join(table(rows)))
        if same:
            print(f"\nCLI and API: the same hits and cluster for {sum(same)} of {len(same)} queries")
        print()


if __name__ == "__main__":
    main()
