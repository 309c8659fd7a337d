"""minidb: a durable networked key-value store on an asyncio runtime built around a timer wheel.

Layers, bottom to top (a lower layer never imports a higher one; tests/test_layers.py checks):

- ``minidb.runtime``: the timer wheel, the event loop that runs its timers on it, the paused
  clock for tests and task introspection. Imports nothing else of minidb.
- ``minidb.protocol``, ``minidb.wal``, ``minidb.store``: pure cores (codecs, log format, data).
- ``minidb.server``, ``minidb.client``: the networked shells.
- ``minidb._cli``: the command line on top.
"""

__version__ = "0.1.0"
