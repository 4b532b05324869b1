"""``corefsearch serve``: the HTTP API and the web page over a warm search engine.

``app``: the FastAPI application (its routes, limits, API key and the thread pool of the model work);
``models``: the requests and answers as pydantic models (what ``/openapi.json`` describes);
``judgements``: whether the corpus judged a hit of a dataset query (relevant, not relevant, unjudged).
The page's files are in ``static/``.
"""
