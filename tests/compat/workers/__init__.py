"""Job queues' workers through a kill -9 of the server (issue 19, "Proof with real clients").

Per library (RQ, arq, Celery) one test: a server on a fixed free port (minidb ``--fsync
always``, or Debian's redis-server ``--appendonly yes --appendfsync always`` for comparison),
MINIDB_COMPAT_JOBS jobs (default 10,000) enqueued with the library's own client, the
library's worker run as a subprocess from its virtualenv (``_venvs``), the server killed -9
once 30% of the jobs ran and restarted on the same port and data, then a wait until every
job ran or nothing moved for ``_run.STALL_S``. The jobs (``side/workload.py``) append
``"<number> <pid>"`` to a file per run, so a job run twice or never is counted; the library's
client then reads every job's state and result. ``_promises`` says what each library
allows an outage to do, and the test fails past it::

    pytest -n0 -s --compat tests/compat/workers                  # 6 runs, minutes each
    MINIDB_COMPAT_JOBS=1000 pytest -n0 -s --compat tests/compat/workers -k "arq and minidb"
"""
