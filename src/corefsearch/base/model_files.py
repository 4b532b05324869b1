"""The settings file that marks each kind of model folder ``corefsearch train KIND`` writes.

Named here, apart from :mod:`corefsearch.base.models` (which reads them to say what a folder is), so that the
registry of shipped models (:mod:`corefsearch.base.shipped`) can check a shipped folder's files without
importing the module that resolves shipped names.
"""

from __future__ import annotations

RETRIEVER_CONFIG = "corefsearch_retriever.json"
RETRIEVER_QUERY_ENCODER = "query_encoder"  # a retriever folder's query encoder (a Hugging Face folder)
READER_CONFIG = "corefsearch_reader.json"
CLUSTERER_CONFIG = "corefsearch_clusterer.json"
DETECTOR_CONFIG = "corefsearch_detector.json"
PAIR_SCORER_CONFIG = "corefsearch_pair_scorer.json"
# The settings file that marks each kind of folder `corefsearch train KIND` writes.
MODEL_KIND_FILES: dict[str, str] = {"retriever": RETRIEVER_CONFIG, "reader": READER_CONFIG,
                                    "clusterer": CLUSTERER_CONFIG, "detector": DETECTOR_CONFIG,
                                    "pair-scorer": PAIR_SCORER_CONFIG}
# The head of our own each kind saves beside its encoder (a retriever has none).
HEAD_FILES: dict[str, str] = {"reader": "reader_head.safetensors", "clusterer": "clusterer_head.safetensors",
                              "detector": "detector_head.safetensors", "pair-scorer": "pair_scorer_head.safetensors"}
