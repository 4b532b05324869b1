"""Fusion of a BM25 and a dense ranking (as in Pyserini's ``pyserini.fusion``):
reciprocal rank fusion and min-max-normalised score interpolation."""

from corefsearch.fusion._base import (
    FUSION_METHODS,
    RRF_K,
    FusionOptions,
    fuse,
    interpolation,
    reciprocal_rank_fusion,
)

__all__ = ["FUSION_METHODS", "RRF_K", "FusionOptions", "fuse", "interpolation", "reciprocal_rank_fusion"]
