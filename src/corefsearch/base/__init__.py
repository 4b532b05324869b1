"""The floor: what every wing and stage builds on, and which knows none of them.

``errors`` (the errors a user can act on), ``schema`` (the records: passages, mentions, queries,
hits, spans), ``artefacts`` (every manifest's writer and reader), ``models`` (model folders, devices,
:class:`~corefsearch.base.models.EncoderWithHead` that every model kind builds on), ``model_files`` (the
settings file that marks each kind of model folder, and each kind's head file), ``head_weights`` (a head's
weights on disk: fp32, or int8 rows in a shipped folder), ``shipped`` (the registry of the models that ship with
corefsearch, and a shipped model's name as its folder), ``model_card``
(renders a model folder's README), ``onnx_backend`` and ``precision`` (runtimes of the forward
passes), ``faiss_gpu``, ``nlp`` (spaCy, loaded once), ``segmentation`` and ``windows`` (text units),
``progress`` and ``memory`` (long runs), ``counts`` (a count and its noun, singular or plural),
``checks`` (the checks of option values that many commands share, such as ``--k`` at least 1).
``corefsearch.io`` and ``corefsearch.training`` are the floor's other two packages.
"""
