"""SigningSecrets in memory: one record per tenant behind a lock (nothing encrypted: a test's process)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from jobsched.domain.secrets import SecretRecord, new_secret
from jobsched.ports import Clock, SystemClock


@dataclass
class MemorySigningSecrets:
    """jobsched.ports.SigningSecrets for tests and simulations."""

    clock: Clock = field(default_factory=SystemClock)
    _records: dict[str, SecretRecord] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def current(self, tenant: str) -> str:
        """The tenant's secret, created on first use."""
        return self.get(tenant).secret

    def get(self, tenant: str) -> SecretRecord:
        """The tenant's record, created on first use (one, however many callers race)."""
        with self._lock:
            record = self._records.get(tenant)
            if record is None:
                record = self._records[tenant] = SecretRecord(new_secret(), self.clock.now())
            return record

    def tenants(self) -> set[str]:
        """The tenants that have a secret (a test's view: the port has no listing)."""
        with self._lock:
            return set(self._records)

    def rotate(self, tenant: str) -> SecretRecord:
        """A new secret for the tenant, its version one above the one it replaces."""
        with self._lock:
            old = self._records.get(tenant)
            record = SecretRecord(new_secret(), self.clock.now(), version=old.version + 1 if old else 1)
            self._records[tenant] = record
            return record
