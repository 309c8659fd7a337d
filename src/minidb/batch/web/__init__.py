"""The operator web page of minidb.batch: static files, no Python.

``index.html``, ``app.js`` (one vanilla ES module) and ``style.css`` are served as they are by
the control API (``GET /`` and ``GET /static/{name}``, without a token); the page logs in with
a token kept in ``sessionStorage`` and gets every piece of data from the authenticated API with
``fetch``. There is no build step and nothing is loaded from another origin, so the page works
on a machine without internet access. This module exists so that ``importlib.resources`` can
find the files as package data.
"""
