"""redis-py's own tests (its sdist's ``tests/``) for hashes, lists, sets, sorted sets, pub/sub,
scripting and its Lock, run against minidb on RESP2 and RESP3 (issue 19).

``selected.txt`` is what a real ``redis-server`` passes (regenerate it with
``python -m tests.compat.redis_py.selection``); ``pending.txt`` lists the tests waiting on a
command not built yet; ``test_redis_py_suite.py`` holds minidb to the rest.
"""
