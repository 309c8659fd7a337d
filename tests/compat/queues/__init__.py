"""The job queues' own test suites against minidb (issue 19, "Proof with real clients").

RQ 2.12.0 (the newest 2.x; forked work horses and ``rq worker`` subprocesses), arq 0.26.3 (on
its pins: redis-py 4.6.0 with hiredis 2.3.2), huey 3.5.4 and kombu 5.7.0's Redis integration
tests (Celery's transport), each from its PyPI sdist (``tests.compat._sdist``), each in its own
virtualenv under ``~/.cache/minidb-compat/venvs`` (created once, keyed by its pip arguments;
minidb is not installed in it: the suite talks RESP over a socket), run by its own pytest
against ``minidb serve --resp-port 0 --fsync always`` on a fresh data dir::

    pytest -n0 --compat tests/compat/queues             # all four
    pytest -n0 --compat tests/compat/queues/test_rq.py  # one

How each suite finds the server, its own way where it has one: kombu reads ``REDIS_HOST`` and
``REDIS_6379_TCP``; arq's conftest asks testcontainers for a Docker Redis, and
``shim/testcontainers`` answers with the harness's server instead; RQ and huey hard-code
``localhost:6379``, so ``shim/sitecustomize.py`` (on ``PYTHONPATH`` of every process they start)
moves a redis-py connection to that address onto the server's port.

What must pass: ``<lib>_selected.txt``, the tests that pass against the Debian redis-server
(``python -m tests.compat.queues.regenerate <lib>`` rewrites it; its header has the command,
the Redis version and how many failed or skipped there), less ``<lib>_pending.txt``: tests that
fail on minidb only because a command is missing (named on each line; asserted nothing of
until ``MINIDB_COMPAT_WITH_PENDING=1`` asks). Each test has a deadline (``Suite.deadline_s``)
after which the suite's process group is killed and the test fails with its output's tail.
A few failures (at most ``_check.MAX_RETRIED``) get one more run of just those on a fresh
server: some tests race the clock or a second worker and lose on a loaded machine (RQ's
two-worker ordering, arq's PTTL within 10 ms of the TTL set); what passes then is printed as
flaky, what fails again fails the test.
"""
