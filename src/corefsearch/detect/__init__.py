"""Mention detection: find the event and entity mentions of plain text, so that every mention-level
feature runs on documents without annotations (predicted mentions, never mixed with gold ones).

==================  ==========================================================================================
``labels``          BIO tags per mention type from character spans, and spans back from tags (pure functions)
``model``           :class:`~corefsearch.detect.model.MentionDetector`: an encoder + one BIO head per type
``heuristic``       the no-training floor: spaCy's parse (verbs and eventive nouns; entities and noun phrases)
``detectors``       a detector by name (``heuristic`` or a model folder from ``train detector``), one interface
``arguments``       the options of ``train detector`` (defaults, help, checks), read without the trainer
``train``           ``corefsearch train detector``: the training and dev passages (those annotated in full,
                    with their gold spans) and the training task on the shared loop, dev mention F1
``run``             ``corefsearch detect``: every passage of a dataset, streamed, batched, resumable
==================  ==========================================================================================
"""
