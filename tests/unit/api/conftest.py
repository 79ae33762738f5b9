"""API unit tests: the resolver over the real services on the in-memory fakes, the network blocked."""

from __future__ import annotations

from tests.unit.services.conftest import World, no_network, world

__all__ = ["World", "no_network", "world"]
