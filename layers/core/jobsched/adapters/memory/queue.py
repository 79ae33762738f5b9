"""RunQueue in memory: delayed messages, visibility timeouts and receipts, on an injected clock."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from jobsched.adapters.sqs import MAX_DELAY_SECONDS
from jobsched.domain.fairness import fair_queue_order
from jobsched.domain.records import Outgoing
from jobsched.ports import Clock


@dataclass(frozen=True, slots=True)
class Received:
    """One delivery of a message: its id, this delivery's receipt, the body."""

    message_id: str
    receipt_handle: str
    body: str


@dataclass
class _Message:
    message_id: str
    body: str
    visible_at: datetime
    receipt: str | None = None
    receives: int = 0
    group: str | None = None
    seq: int = 0


@dataclass
class MemoryRunQueue:
    """The execution queue; `receive` and `delete` play the SQS event source's side."""

    clock: Clock
    visibility_seconds: int = 30
    _messages: dict[str, _Message] = field(default_factory=dict, repr=False)
    _ids: itertools.count[int] = field(default_factory=itertools.count, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def send(self, outgoing: Sequence[Outgoing]) -> None:
        """Queue every message, each visible after its delay (capped as SQS caps it)."""
        now = self.clock.now()
        with self._lock:
            for o in outgoing:
                seq = next(self._ids)
                message_id = f"m-{seq}"
                delay = max(0, min(MAX_DELAY_SECONDS, o.delay_seconds))
                self._messages[message_id] = _Message(
                    message_id,
                    o.message.model_dump_json(),
                    now + timedelta(seconds=delay),
                    group=o.group,
                    seq=seq,
                )

    def extend(self, receipt_handle: str, *, seconds: int) -> bool:
        """Make the message of this receipt invisible for `seconds` from now; False if the receipt
        is not its latest one (deleted, or received again since)."""
        now = self.clock.now()
        with self._lock:
            for m in self._messages.values():
                if m.receipt == receipt_handle:
                    m.visible_at = now + timedelta(seconds=seconds)
                    return True
            return False

    # -- the consumer's side (not part of the port) -----------------------------------------------
    def receive(self, limit: int = 10) -> list[Received]:
        """Up to `limit` visible messages, each invisible for the visibility timeout: oldest first, in
        fair-queue order across groups (jobsched.domain.fairness.fair_queue_order), as SQS fair
        queues deliver; without groups, plain oldest first."""
        now = self.clock.now()
        got: list[Received] = []
        with self._lock:
            ordered = sorted(self._messages.values(), key=lambda m: (m.visible_at, m.seq))
            visible = [m for m in ordered if m.visible_at <= now]
            busy: dict[str | None, int] = {}
            for m in ordered:
                if m.receipt is not None and m.visible_at > now:
                    busy[m.group] = busy.get(m.group, 0) + 1
            for m in fair_queue_order(visible, group=lambda m: m.group, in_flight=busy):
                if len(got) == limit:
                    break
                m.receives += 1
                m.receipt = f"{m.message_id}#{m.receives}"
                m.visible_at = now + timedelta(seconds=self.visibility_seconds)
                got.append(Received(m.message_id, m.receipt, m.body))
        return got

    def delete(self, receipt_handle: str) -> bool:
        """Delete the message of this receipt (its latest); False if there is none."""
        with self._lock:
            for key, m in self._messages.items():
                if m.receipt == receipt_handle:
                    del self._messages[key]
                    return True
            return False

    def peek(self) -> list[tuple[datetime, str]]:
        """Every message in the queue as (when it is visible, body), visible or not."""
        with self._lock:
            return sorted((m.visible_at, m.body) for m in self._messages.values())

    def depth(self) -> int:
        """Messages in the queue, visible or not."""
        with self._lock:
            return len(self._messages)
