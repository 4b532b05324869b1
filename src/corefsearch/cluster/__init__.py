"""Whole-corpus coreference clustering of a dataset's gold mentions (``corefsearch cluster``) and the
contrastive mention encoder that drives it (``corefsearch train clusterer``, Hsu & Horwood 2022).

``mentions``: the mentions of a split; ``topics``: the groups they are clustered within (gold topics,
predicted topics, the whole split); ``baselines``: singletons and same head lemma; ``inputs``: a
mention's encoder input (document start + marked sentence); ``model``: the mention encoder;
``encoder``: clustering with it; ``agglomerative``: average linkage, all pairs or over a kNN graph;
``heuristic``: ``--method lemma-heuristic`` (Ahmed et al. 2023); ``candidates``: the candidate pairs a pair
scorer (``corefsearch.pair_scorer``) reads and the clusters of the scored pairs; ``predicted``: the mentions
a detector found (``--mentions predicted``); ``agreement``: how predicted topics agree with the gold ones
(adjusted Rand index, V-measure); ``loss``, ``pairs`` and ``batches``: contrastive training; ``train``: the
training task, whose options are ``arguments`` (read by the command line without the trainer); ``output``:
the clusters JSONL and CoNLL files; ``run``: the command's entry point, :func:`run.cluster_dataset` (a cluster
that encodes the mentions elsewhere, such as Ray's, is passed in as a ``run.MentionEncoding``).
"""
