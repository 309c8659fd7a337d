"""minidb.batch: a durable task queue on object storage (pure cores; the async shells sit on top).
"""
