"""The client's tests reuse the server's subprocess fixture."""

from tests.server.conftest import serve

__all__ = ["serve"]
