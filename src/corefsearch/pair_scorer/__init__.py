"""The pair scorer (a wing): a mention-pair cross-encoder that reads two marked mentions together and gives
the probability that they corefer (Ahmed et al. 2023), for ``cluster --method encoder --pair-scorer``.

``model``: :class:`~corefsearch.pair_scorer.model.PairScorer` (an encoder, a pair head and its config, saved
and loaded), the candidate pairs it scores and their clustering at its threshold (``cluster --pair-scorer``);
``arguments``: the options of ``corefsearch train pair-scorer``, read by the command line without the trainer;
``train``: the training task on the shared loop, with the threshold and linkage picked on dev. The mentions,
their candidate pairs and the linkages are the cluster wing's (``corefsearch.cluster``).
"""
