"""The operator web page of minidb: static files, no Python.

``index.html``, ``app.js`` (the shell: session, header, views) with its ES modules ``api.js``,
``dom.js``, ``store.js``, ``server.js`` and ``batch.js``, and ``style.css`` are served as they
are by the control API (``GET /`` and ``GET /static/{name}``, without a token); ``vendor/``
holds the one third-party library, uPlot (the charts), with its licence
(``GET /static/vendor/{name}``; where it came from: ``vendor/VENDORED.txt``). The page logs in
with a token kept in ``sessionStorage`` and gets every piece of data from the authenticated
API with ``fetch``. There is no build step and nothing is loaded from another origin, so the
page works on a machine without internet access. This module exists so that
``importlib.resources`` can find the files as package data.
"""
