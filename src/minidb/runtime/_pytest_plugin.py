"""pytest plugin entry point of minidb.runtime (fixtures land with minidb.runtime.testing)."""
