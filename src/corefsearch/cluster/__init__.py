"""Whole-corpus coreference clustering of a dataset's gold mentions (``corefsearch cluster``).

``mentions``: the mentions of a split; ``topics``: the groups they are clustered within (gold topics,
predicted topics, the whole split); ``baselines``: singletons and same head lemma; ``output``: the
clusters JSONL and CoNLL files; ``run``: the command's entry point, :func:`run.cluster_dataset`.
"""
