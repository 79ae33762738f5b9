"""The embedded AWS: moto's server on loopback, one request at a time.

moto's backends are not thread-safe: two TransactWriteItems at once fail inside moto with
"dictionary changed size during iteration" (seen under a burst of concurrent creates). Real AWS has
no such limit, so the embedded server serializes requests itself instead of the scheduler bending to
it: a WSGI wrapper holds one lock around each request. Nothing may therefore hold a request open
(no SQS long polling against it: the local pollers short-poll).

Two more moto 5.2.5 behaviours would make a long-lived local stack slow down and grow without bound,
so the embedded server corrects them, for the requests it serves only (AWS has neither problem, and
moto used in-process by tests through `mock_aws` is left as it is):

- Every object moto's models create (each DynamoDB item, each copy of one made to answer a Query or
  a Scan, each SQS message) is appended to a class-level list, `BaseModel.instances_tracked`, that
  only moto's dashboard reads (`/moto-api/data.json`) and only a full reset empties: nothing moto
  makes is ever freed. After each request the server empties those lists (`_forget_instances`); the
  backends keep their own references to what they still hold, so only the dashboard loses anything.
- `TransactWriteItems` snapshots, for rollback, a deep copy of the whole table once per item that
  names it (two copies per job creation), i.e. work and garbage in proportion to the table for
  every transaction; with the tracking above, memory grew quadratically (`make soak`: 7.2 GB and
  POST latency 0.03 s -> 0.24 s over 1,168 creations). `_transact_write_items` snapshots only the
  items the transaction names and lets moto run the transaction itself unchanged, with its
  whole-table copy replaced by the table itself (`_TablesByReference`); if moto raises (a cancelled
  transaction, a validation error) it puts exactly those items back, which is what moto's copy
  restored. The transaction's semantics (conditions, cancellation reasons, all-or-nothing) are moto's.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import threading
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any

from werkzeug.serving import BaseWSGIServer, make_server

# moto stamps every message it is sent with one SenderId, whoever sends it: the local stack trusts
# that one sender, so it cannot tell the stack's own senders from others as SQS does on AWS (there
# the queue's policy and each role's own id tell them apart; see jobsched.domain.senders).
MOTO_SENDER_ID = "AIDAIT2UOQQY3AUEKVGXU"

_serving = threading.local()  # .active: this thread is handling a request for the embedded server


def _forget_instances() -> None:
    """Empty moto's per-class lists of every model instance ever created (see the module doc)."""
    from moto.core.model_instances import model_data

    for models in list(model_data.values()):
        for model in list(models.values()):
            tracked = getattr(model, "instances_tracked", None)
            if tracked:
                tracked.clear()


class _TablesByReference:
    """Stands in for the `copy` module inside moto.dynamodb.models.

    While `_transact_write_items` runs moto's transaction (`_serving.by_reference`), a deep copy
    of a Table is the table itself, so moto's rollback puts back the very object it already holds.
    Every other copy (UpdateItem copies the old item) and every other thread is untouched.
    """

    def __init__(self, table_type: type) -> None:
        self._table_type = table_type

    def deepcopy(self, value: Any, memo: dict[int, Any] | None = None) -> Any:
        if getattr(_serving, "by_reference", False) and isinstance(value, self._table_type):
            return value
        return copy.deepcopy(value, memo)

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)


def _snapshot(backend: Any, transact_items: list[dict[str, Any]]) -> list[tuple[Any, ...]] | None:
    """A deep copy of each item the transaction names (None where there is none), or None if a
    key cannot be read (then moto's own whole-table copy is used)."""
    seen: set[tuple[int, Any, Any]] = set()
    saved: list[tuple[Any, ...]] = []
    try:
        for entry in transact_items:
            _, op = next(iter(entry.items()))
            table = backend.tables.get(op.get("TableName"))
            if table is None:
                continue  # moto cancels the transaction: no such table
            if "Item" in op:  # Put
                key = {a: op["Item"][a] for a in table.table_key_attrs if a in op["Item"]}
            else:  # Update, Delete, ConditionCheck
                key = op["Key"]
            hash_key, range_key = backend.get_keys_value(table, key)
            if (id(table), hash_key, range_key) in seen:
                continue  # moto refuses two operations on one item
            seen.add((id(table), hash_key, range_key))
            if range_key is None:
                item = table.items.get(hash_key)
            else:
                item = (table.items.get(hash_key) or {}).get(range_key)
            saved.append((table, hash_key, range_key, copy.deepcopy(item)))
    except Exception:
        return None
    return saved


def _restore(saved: list[tuple[Any, ...]], streams: list[tuple[Any, int]]) -> None:
    """Put back the items `_snapshot` copied and drop stream records written since."""
    for table, hash_key, range_key, item in saved:
        if range_key is None:
            if item is None:
                table.items.pop(hash_key, None)
            else:
                table.items[hash_key] = item
        elif item is None:
            table.items.get(hash_key, {}).pop(range_key, None)
        else:
            table.items[hash_key][range_key] = item
    for shard, length in streams:
        del shard.items[length:]


def _patch_transactions() -> None:
    """Install `_transact_write_items` on moto's DynamoDB backend (once per process)."""
    from moto.dynamodb import models

    dynamodb_models: Any = models
    backend_type: Any = dynamodb_models.DynamoDBBackend
    if getattr(backend_type.transact_write_items, "jobsched_patched", False):
        return
    original = backend_type.transact_write_items
    dynamodb_models.copy = _TablesByReference(dynamodb_models.Table)

    def _transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        saved = _snapshot(self, transact_items) if getattr(_serving, "active", False) else None
        if saved is None:
            return original(self, transact_items)  # type: ignore[no-any-return]
        streams = [
            (table.stream_shard, len(table.stream_shard.items))
            for table in {id(t): t for t, *_ in saved}.values()
            if table.stream_shard is not None
        ]
        _serving.by_reference = True
        try:
            return original(self, transact_items)  # type: ignore[no-any-return]
        except BaseException:
            _restore(saved, streams)
            raise
        finally:
            _serving.by_reference = False

    _transact_write_items.jobsched_patched = True  # type: ignore[attr-defined]
    backend_type.transact_write_items = _transact_write_items


def _patch_fair_queues() -> None:
    """Make moto's standard queues deliver as SQS fair queues do (once per process).

    moto 5.2.5 takes a MessageGroupId on a standard queue and keeps it, but delivers in arrival
    order, so a noisy tenant's burst sent first would hold up every tenant behind it, which AWS
    (fair queues: a group with fewer messages in flight is served first) does not do. For the
    requests the embedded server serves, a standard queue's visible messages are listed oldest
    available first (when their delay or lease ended), then in
    jobsched.domain.fairness.fair_queue_order; moto's ReceiveMessage takes them in that order. FIFO
    queues, moto used in-process (`mock_aws`) and an outside endpoint are left as they are.
    """
    from moto.sqs import models

    queue_type: Any = models.Queue
    listed = queue_type.messages
    if getattr(listed.fget, "jobsched_patched", False):
        return
    from jobsched.domain.fairness import fair_queue_order

    def messages(self: Any) -> list[Any]:  # moto's Queue.messages, in fair-queue order
        visible: list[Any] = listed.fget(self)
        if not getattr(_serving, "active", False) or self.fifo_queue:
            return visible
        # Oldest available first (a standard queue's best effort), then by group: a message whose
        # delay ended earlier (a high run's, sent with a shorter one) leads its group.
        visible.sort(key=lambda m: max(m.visible_at, m.delayed_until))
        in_flight: dict[str | None, int] = {}
        for m in self.pending_messages:
            if not m.visible:
                in_flight[m.group_id] = in_flight.get(m.group_id, 0) + 1
        return fair_queue_order(visible, group=lambda m: m.group_id, in_flight=in_flight)

    fair = property(messages)
    fair.fget.jobsched_patched = True  # type: ignore[union-attr]
    queue_type.messages = fair


class _OneAtATime:
    """WSGI middleware: run the wrapped app under one lock, the response body included."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self._app = app
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        with self._lock:
            _serving.active = True
            try:
                return list(self._app(environ, start_response))
            finally:
                _serving.active = False
                _forget_instances()


class EmbeddedAws:
    """moto's server on host:port in a daemon thread, with Step Functions executing for real."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint_url(self) -> str:
        """The endpoint boto3 clients use."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> EmbeddedAws:
        """Serve, then switch on state machine execution."""
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's per-request access log
        # moto's state machine executor calls DynamoDB/SQS/SNS over HTTP at localhost:$MOTO_PORT.
        os.environ["MOTO_PORT"] = str(self.port)
        _patch_transactions()
        _patch_fair_queues()
        app = _OneAtATime(DomainDispatcherApplication(create_backend_app))
        self._server = make_server(
            self.host, self.port, app, threaded=True, request_handler=MotoRequestHandler
        )
        self._thread = threading.Thread(target=self._server.serve_forever, name="jobsched-moto", daemon=True)
        self._thread.start()
        request = urllib.request.Request(
            f"{self.endpoint_url}/moto-api/config",
            data=json.dumps({"stepfunctions": {"execute_state_machine": True}}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        urllib.request.urlopen(request, timeout=10).close()
        return self

    def stop(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
