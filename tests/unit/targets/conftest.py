"""Target unit tests: pure logic, the network blocked (a test that resolves or connects fails)."""

from __future__ import annotations

from tests.unit.services.conftest import NetworkBlocked, no_network, world

__all__ = ["NetworkBlocked", "no_network", "world"]
