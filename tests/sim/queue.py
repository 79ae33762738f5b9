"""SQS standard-queue semantics on the simulated clock, over jobsched's in-memory RunQueue.

MemoryRunQueue already keeps DelaySeconds (capped at 900 s), the visibility timeout, extend
(ChangeMessageVisibility) and receipts that go stale on a later receive. SimQueue adds what a
standard queue also does, each drawn from the schedule's rng:

- receive order is not FIFO: visible messages come back in a random order;
- at-least-once: a receive may leave a message visible (SQS handed a copy to another host), so a
  second receive gets it again at once, under a new receipt;
- every receive counts; the receive after the redrive policy's maxReceiveCount moves the message
  to the dead-letter queue instead (the value comes from jobsched.resources.EXECUTION_QUEUE, the
  definition the CDK stack and the local stack both read).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import timedelta

from jobsched import resources
from jobsched.adapters.memory import MemoryRunQueue, Received

MAX_RECEIVE_COUNT = resources.EXECUTION_QUEUE.max_receive_count
VISIBILITY_SECONDS = resources.EXECUTION_QUEUE.visibility_timeout_seconds


@dataclass
class SimQueue(MemoryRunQueue):
    """The execution queue with its redrive dead-letter queue (`dead`, read by the reconciler)."""

    rng: random.Random = field(default_factory=random.Random)
    duplicate_rate: float = 0.0
    max_receive_count: int = MAX_RECEIVE_COUNT
    dead: list[Received] = field(default_factory=list)
    duplicates: int = 0
    redriven: int = 0
    sent: int = 0

    def send(self, outgoing: object) -> None:  # type: ignore[override]
        super().send(outgoing)  # type: ignore[arg-type]
        self.sent += len(outgoing)  # type: ignore[arg-type]

    def receive(self, limit: int = 10) -> list[Received]:
        """Up to `limit` visible messages in a random order, each invisible for the visibility timeout
        (unless SQS hands out a duplicate); a message received maxReceiveCount times before goes to
        the dead-letter queue on this receive."""
        now = self.clock.now()
        got: list[Received] = []
        with self._lock:
            visible = [m for m in self._messages.values() if m.visible_at <= now]
            visible.sort(key=lambda m: m.message_id)  # a stable base order, then the seeded shuffle
            self.rng.shuffle(visible)
            for m in visible:
                if len(got) == limit:
                    break
                if self.max_receive_count and m.receives >= self.max_receive_count:
                    del self._messages[m.message_id]
                    self.dead.append(Received(m.message_id, f"{m.message_id}#dlq", m.body))
                    self.redriven += 1
                    continue
                m.receives += 1
                m.receipt = f"{m.message_id}#{m.receives}"
                if self.rng.random() < self.duplicate_rate:
                    self.duplicates += 1  # stays visible: the next receive delivers it again
                else:
                    m.visible_at = now + timedelta(seconds=self.visibility_seconds)
                got.append(Received(m.message_id, m.receipt, m.body))
        return got

    def take_dead(self, limit: int = 10) -> list[Received]:
        """The reconciler's receive on the dead-letter queue (deleted as it is read)."""
        with self._lock:
            out, self.dead = self.dead[:limit], self.dead[limit:]
            return out

    def bodies(self) -> list[str]:
        with self._lock:
            return [m.body for m in self._messages.values()]
