"""Fusion of a BM25 and a dense ranking (as in Pyserini's ``pyserini.fusion``):
reciprocal rank fusion and min-max-normalised score interpolation.

``methods``: the two fusions, :class:`~corefsearch.fusion.methods.FusionOptions` (``--fusion``, its alpha and
the RRF constant) and :func:`~corefsearch.fusion.methods.fuse`; their names are re-exported here, where
other packages import them from.
"""

from corefsearch.fusion.methods import (
    FUSION_METHODS,
    RRF_K,
    FusionOptions,
    fuse,
    interpolation,
    reciprocal_rank_fusion,
)

__all__ = ["FUSION_METHODS", "RRF_K", "FusionOptions", "fuse", "interpolation", "reciprocal_rank_fusion"]
