"""minidb.up: the whole system on this machine in one command (``minidb up``).

``minidb up`` is a supervisor of two child processes: ``minidb serve`` (the line and RESP
listeners, metrics, the WAL under ``DATA/server``) and ``minidb batch serve --workers 1`` (the
control API, the web page and one worker on the ``file:DATA/objects`` store, or ``--store``).
It prints every address and the operator token, and on SIGINT/SIGTERM stops the API first (a
client of the server) and then the server, each gracefully, and exits 0. No child outlives it:
each runs in its own process group with ``PR_SET_PDEATHSIG`` (docs/architecture.md, "minidb
up").

Modules: ``_tokens`` (the operator token file, found or made), ``_children`` (one supervised
child: spawn, its listening lines, stop), ``_supervisor`` (the start order, the printed lines,
the signals), ``_cli`` (the ``up`` subcommand). Nothing else in minidb imports this package.
"""

from minidb.up._supervisor import UpConfig, run_up

__all__ = ["UpConfig", "run_up"]
