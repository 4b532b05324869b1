"""Datasets (a wing): a coreference corpus turned into a coreference-search dataset, and read back.

One module per source format: ``ecbplus`` (the ECB+ XML corpus), ``wec`` (WEC-Eng JSON),
``coresearch`` (the published CoreSearch release), ``generic`` (``corpus.jsonl`` +
``mentions.jsonl`` of your own) and ``text`` (plain documents without mentions: ``.txt`` files, a
``corpus.jsonl`` or a table, read by ``tables``), ``cdcr_json`` (the CDCR tokens + gold-mention JSON
of Barhom et al. 2019) and
``conll`` (the CoNLL coreference format of the reference scorer; ``conll_ids`` the ids of a folder's
documents), both over ``tokenised`` (documents rebuilt from tokens); ``sources`` reads any of them by
name. ``build`` writes the dataset directory (passages, queries, qrels, clusters, manifest) with a
writer that can append (``corefsearch add``). ``dataset`` reads a dataset directory
(:class:`~corefsearch.datasets.dataset.Dataset`: its paths, passages, queries and gold clusters, each
record checked once), ``passages`` reads one passage by id without loading the file, and ``lookup``
finds one query with its relevant passages and gold mentions (``query --dataset --qid``).
"""
