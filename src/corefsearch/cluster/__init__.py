"""Whole-corpus coreference clustering of a dataset's gold mentions (``corefsearch cluster``) and the
contrastive mention encoder that drives it (``corefsearch train clusterer``, Hsu & Horwood 2022).

``mentions``: the mentions of a split; ``topics``: the groups they are clustered within (gold topics,
predicted topics, the whole split); ``baselines``: singletons and same head lemma; ``inputs``: a
mention's encoder input (document start + marked sentence); ``model``: the mention encoder;
``encoder``: clustering with it; ``agglomerative``: average linkage, all pairs or over a kNN graph;
``loss`` and ``pairs``: contrastive training; ``train``: the training task; ``output``: the clusters
JSONL and CoNLL files; ``run``: the command's entry point, :func:`run.cluster_dataset` (a cluster
that encodes the mentions elsewhere, such as Ray's, is passed in as a ``run.MentionEncoding``).
"""
