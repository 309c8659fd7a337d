"""A stand-in for ``testcontainers`` (no Docker here): arq's conftest asks it for a Redis."""
