"""``corefsearch serve``: the HTTP API and the web page over a warm search engine (see app.py)."""
