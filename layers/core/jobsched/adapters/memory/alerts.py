"""AlertStore and AlertPublisher in memory: the same one-per-id keeping and newest-first listing."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jobsched.adapters.alerts import alert_item, at_key
from jobsched.domain import times
from jobsched.domain.alerts import Alert
from jobsched.domain.alerts import alert_partition as tenant_pk
from jobsched.domain.records import Cursor
from jobsched.errors import JobschedError


@dataclass
class MemoryAlertStore:
    """Alerts by (tenant, alert id); a page's cursor has the recent index's key attributes."""

    kept: dict[tuple[str, str], Alert] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def record(self, alert: Alert) -> bool:
        """Keep it unless its id is kept already."""
        with self._lock:
            if (alert.tenant, alert.alert_id) in self.kept:
                return False
            self.kept[(alert.tenant, alert.alert_id)] = alert
            return True

    def recent(
        self, tenant: str, *, since: datetime | None, start: Cursor | None, limit: int
    ) -> tuple[list[Alert], Cursor | None]:
        """Newest first by (at, id), as the recent index sorts."""
        with self._lock:
            mine = sorted(
                (a for (t, _), a in self.kept.items() if t == tenant),
                key=lambda a: at_key(a.at, a.alert_id),
                reverse=True,
            )
        if since is not None:
            mine = [a for a in mine if at_key(a.at, a.alert_id) >= times.stored(since)]
        if start is not None:
            mine = [a for a in mine if at_key(a.at, a.alert_id) < start["at_key"]["S"]]
        page = mine[:limit]
        if len(page) < limit or len(page) == len(mine):
            return page, None
        last = page[-1]
        return page, {
            "PK": {"S": tenant_pk(tenant)},
            "SK": {"S": last.alert_id},
            "at_key": {"S": at_key(last.at, last.alert_id)},
        }

    def workflow_item(self, alert: Alert) -> dict[str, Any]:
        """The item the DynamoDB store would write."""
        return alert_item(alert)


@dataclass
class MemoryAlertPublisher:
    """Keeps every published alert in order; `failure` set: every publish raises it instead."""

    published: list[Alert] = field(default_factory=list)
    failure: JobschedError | None = None

    def publish(self, alert: Alert) -> None:
        """Append it (or raise the configured failure)."""
        if self.failure is not None:
            raise self.failure
        self.published.append(alert)
