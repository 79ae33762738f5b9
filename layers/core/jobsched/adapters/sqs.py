"""SQS adapter: hands runs to the execution queue and extends leases (visibility timeouts)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from jobsched.adapters.aws import aws_call
from jobsched.domain.records import Outgoing
from jobsched.errors import StoreError, StoreUnreachable, TransientStoreError

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

MAX_DELAY_SECONDS = 900  # SQS's cap on a message delay
BATCH = 10  # SQS's cap on a SendMessageBatch


@dataclass
class RunQueue:
    """The queue this process receives from (`queue_url`), and the worker queues of the other lanes.

    A message goes to its Outgoing.lane's queue (`lanes`), or to `queue_url` when it names none
    or a lane this deployment has no queue for; extend() is always on `queue_url`, the queue
    this process's receipts come from (the ECS worker's own, or the Lambda worker's execution queue).
    """

    client: SQSClient
    queue_url: str
    lanes: dict[str, str] = field(default_factory=dict)

    def send(self, outgoing: Sequence[Outgoing]) -> None:
        """Send every run, in batches of ten; raises TransientStoreError if any is refused.

        All-or-error: a caller that sees no exception knows every message is in the queue.
        Entries that SQS refuses in a partly failed batch are retried once; a message sent
        twice is harmless (workers treat a run's second message as a duplicate).
        """
        by_queue: dict[str, list[Outgoing]] = {}
        for o in outgoing:
            by_queue.setdefault(self.lanes.get(o.lane or "", self.queue_url), []).append(o)
        for queue_url, sent in by_queue.items():
            self._send(queue_url, sent)

    def _send(self, queue_url: str, outgoing: Sequence[Outgoing]) -> None:
        for start in range(0, len(outgoing), BATCH):
            chunk = outgoing[start : start + BATCH]
            pending = {str(i): o for i, o in enumerate(chunk)}
            for _ in range(2):
                # A group is the fair-queue tenant: on a standard queue SQS takes MessageGroupId for
                # fairness only (no FIFO order, no per-group lock), free of charge, in the same call.
                entries = [
                    {
                        "Id": key,
                        "MessageBody": o.message.model_dump_json(),
                        "DelaySeconds": max(0, min(MAX_DELAY_SECONDS, o.delay_seconds)),
                        **({"MessageGroupId": o.group} if o.group else {}),
                    }
                    for key, o in pending.items()
                ]
                try:
                    with aws_call("SQS"):
                        out = self.client.send_message_batch(QueueUrl=queue_url, Entries=entries)  # type: ignore[arg-type]
                except StoreUnreachable:
                    raise
                except StoreError as exc:  # every refusal of a send is worth a retry later
                    raise TransientStoreError(f"SQS refused the batch: {exc}") from exc
                pending = {f["Id"]: pending[f["Id"]] for f in out.get("Failed", [])}
                if not pending:
                    break
            if pending:
                raise TransientStoreError(f"SQS refused {len(pending)} message(s) twice")

    def extend(self, receipt_handle: str, *, seconds: int) -> bool:
        """Extend a received message's lease; False if the receipt is no longer valid."""
        try:
            with aws_call("SQS"):
                self.client.change_message_visibility(
                    QueueUrl=self.queue_url, ReceiptHandle=receipt_handle, VisibilityTimeout=seconds
                )
        except StoreUnreachable:
            raise  # no answer: the caller cannot know whether the lease was extended
        except StoreError:
            return False
        return True


__all__ = ["MAX_DELAY_SECONDS", "Outgoing", "RunQueue"]
