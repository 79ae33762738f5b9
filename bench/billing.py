"""What AWS bills for each DynamoDB and SQS request: a billing model, not a call count.

A `Meter` hooks botocore's events on the sessions whose clients it should bill. For every DynamoDB
write it reads the item before and after with its own uncounted client (moto: cheap) and bills it
as DynamoDB on demand does:

- base table: ceil(max(size before, size after) / 1 KB) write request units (WRU), at least 1;
- each global secondary index, from the index entries before and after (keys + projection):
  both present, same index key, a projected attribute changed -> 1 write of the entry;
  both present, index key changed -> a delete plus a put (2 writes); only after -> 1 put;
  only before -> 1 delete; nothing projected changed (or absent both times) -> 0;
- TransactWriteItems: twice every write it holds, a ConditionCheck costing like a write;
- a refused conditional write: ceil(size of the stored item / 1 KB), at least 1, no index writes.

Reads: GetItem ceil(size / 4 KB) read request units (RRU), half for an eventually consistent read,
at least one unit even for a missing item; Query ceil(sum of the sizes of the items read / 4 KB) per
request (before any filter), half when eventually consistent (an index query always is); a
transactional read costs double. Item size follows DynamoDB's rules (attribute name + value bytes;
numbers 1 byte per two significant digits + 1; lists and maps 3 bytes + 1 per element).

SQS: one request per call, but every 64 KB chunk of a send's payload counts as another request.

Thread safety: moto's in-process backends are not thread-safe, and Step Functions executions run on
their own threads, so every hooked call (and the meter's own reads) runs under one re-entrant lock,
as the local stack's embedded server serialises requests.
"""

from __future__ import annotations

import functools
import math
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

KB = 1024
READ_UNIT_BYTES = 4 * KB
SQS_CHUNK_BYTES = 64 * KB

_WRITES = {"PutItem", "UpdateItem", "DeleteItem"}
_SENDS = {"SendMessage", "SendMessageBatch"}

# -- item size -----------------------------------------------------------------------------------


def _number_size(text: str) -> int:
    """1 byte per two significant digits, plus 1 (leading and trailing zeroes are trimmed)."""
    try:
        digits = Decimal(text).normalize().as_tuple().digits
    except InvalidOperation:
        digits = tuple(int(c) for c in text if c.isdigit())
    significant = len(digits) if any(digits) else 1
    return math.ceil(significant / 2) + 1


def _blob_size(value: Any) -> int:
    return len(value) if isinstance(value, bytes | bytearray) else len(str(value).encode())


def value_size(value: Mapping[str, Any]) -> int:
    """Bytes of one typed attribute value ({"S": ...}, {"N": ...}, {"M": {...}}, ...), without its name."""
    ((kind, raw),) = value.items()
    if kind == "S":
        return len(str(raw).encode())
    if kind == "N":
        return _number_size(str(raw))
    if kind == "B":
        return _blob_size(raw)
    if kind in {"BOOL", "NULL"}:
        return 1
    if kind == "SS":
        return sum(len(str(s).encode()) for s in raw)
    if kind == "NS":
        return sum(_number_size(str(n)) for n in raw)
    if kind == "BS":
        return sum(_blob_size(b) for b in raw)
    if kind == "L":
        return 3 + sum(value_size(v) + 1 for v in raw)
    if kind == "M":
        return 3 + sum(len(k.encode()) + value_size(v) + 1 for k, v in raw.items())
    raise ValueError(f"unknown DynamoDB type {kind!r}")


def item_size(item: Mapping[str, Mapping[str, Any]] | None) -> int:
    """Bytes of an item as DynamoDB sizes it: every attribute's name plus its value."""
    if not item:
        return 0
    return sum(len(name.encode()) + value_size(value) for name, value in item.items())


def write_units(size: int) -> int:
    """WRU for writing `size` bytes (1 KB units, at least 1)."""
    return max(1, math.ceil(size / KB))


def read_units(size: int, *, consistent: bool) -> float:
    """RRU for reading `size` bytes in one request (4 KB units, at least 1; half if eventually consistent)."""
    units = max(1, math.ceil(size / READ_UNIT_BYTES))
    return float(units) if consistent else units / 2


# -- table shapes ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IndexShape:
    """A global secondary index: its key attributes and the non-key attributes it projects."""

    name: str
    partition_key: str
    sort_key: str | None = None
    projected: frozenset[str] = frozenset()
    projects_all: bool = False

    @property
    def keys(self) -> tuple[str, ...]:
        """The index key attributes."""
        return (self.partition_key, self.sort_key) if self.sort_key else (self.partition_key,)


@dataclass(frozen=True, slots=True)
class TableShape:
    """A table: its key attributes and its global secondary indexes."""

    name: str
    partition_key: str
    sort_key: str | None = None
    indexes: tuple[IndexShape, ...] = ()

    @property
    def keys(self) -> tuple[str, ...]:
        """The table key attributes."""
        return (self.partition_key, self.sort_key) if self.sort_key else (self.partition_key,)

    def key_of(self, item: Mapping[str, Any]) -> dict[str, Any]:
        """The primary key of an item."""
        return {k: item[k] for k in self.keys}

    def index(self, name: str) -> IndexShape:
        """The index called `name`."""
        for index in self.indexes:
            if index.name == name:
                return index
        raise KeyError(name)

    def entry(self, index: IndexShape, item: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """The item's entry in `index` (table keys, index keys, projected attributes); None if not indexed."""
        if not item or any(k not in item for k in index.keys):
            return None
        if index.projects_all:
            return dict(item)
        wanted = set(self.keys) | set(index.keys) | index.projected
        return {k: v for k, v in item.items() if k in wanted}


def shapes_from_specs(prefix: str) -> dict[str, TableShape]:
    """Every table of jobsched.resources as the local stack names it for `prefix`."""
    from jobsched import resources

    out: dict[str, TableShape] = {}
    # The signing secrets' table too: an http target's worker reads it (GetItem) once per cached minute.
    for spec in (*resources.TABLES, resources.SIGNING_SECRETS_TABLE):
        name = resources.physical_name(prefix, spec)
        out[name] = TableShape(
            name=name,
            partition_key=spec.partition_key,
            sort_key=spec.sort_key,
            indexes=tuple(
                IndexShape(
                    name=i.name,
                    partition_key=i.partition_key,
                    sort_key=i.sort_key,
                    projected=frozenset(i.non_key_attributes),
                )
                for i in spec.indexes
            ),
        )
    return out


def shape_from_description(table: Mapping[str, Any]) -> TableShape:
    """A TableShape from DescribeTable's "Table" (what moto or AWS actually built)."""

    def keys(schema: Iterable[Mapping[str, str]]) -> tuple[str, str | None]:
        by_type = {k["KeyType"]: k["AttributeName"] for k in schema}
        return by_type["HASH"], by_type.get("RANGE")

    pk, sk = keys(table["KeySchema"])
    indexes = []
    for gsi in table.get("GlobalSecondaryIndexes", []):
        ipk, isk = keys(gsi["KeySchema"])
        projection = gsi.get("Projection", {})
        indexes.append(
            IndexShape(
                name=gsi["IndexName"],
                partition_key=ipk,
                sort_key=isk,
                projected=frozenset(projection.get("NonKeyAttributes", [])),
                projects_all=projection.get("ProjectionType") == "ALL",
            )
        )
    return TableShape(name=table["TableName"], partition_key=pk, sort_key=sk, indexes=tuple(indexes))


# -- the write bill ------------------------------------------------------------------------------------


@dataclass
class WriteBill:
    """The WRU of one write: the base table's and each index's."""

    table: int = 0
    indexes: Counter[str] = field(default_factory=Counter)

    @property
    def total(self) -> int:
        """Base table plus indexes."""
        return self.table + sum(self.indexes.values())


def bill_write(shape: TableShape, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> WriteBill:
    """WRU of a write that took the item from `old` to `new` (None: absent), as DynamoDB bills it."""
    bill = WriteBill(table=write_units(max(item_size(old), item_size(new))))
    for index in shape.indexes:
        before, after = shape.entry(index, old), shape.entry(index, new)
        if before is not None and after is not None:
            if any(before[k] != after[k] for k in index.keys):
                # The entry moves: a delete of the old one and a put of the new one.
                bill.indexes[index.name] += write_units(item_size(before)) + write_units(item_size(after))
            elif before != after:
                bill.indexes[index.name] += write_units(max(item_size(before), item_size(after)))
        elif after is not None:
            bill.indexes[index.name] += write_units(item_size(after))
        elif before is not None:
            bill.indexes[index.name] += write_units(item_size(before))
    return bill


def bill_refused_write(old: Mapping[str, Any] | None) -> WriteBill:
    """A conditional write whose condition failed: the stored item's size in WRU, no index writes."""
    return WriteBill(table=write_units(item_size(old)))


# -- usage -------------------------------------------------------------------------------------------


@dataclass
class Usage:
    """What a stretch of work cost: calls by operation, WRU, RRU, SQS requests."""

    calls: Counter[str] = field(default_factory=Counter)
    wru: Counter[str] = field(default_factory=Counter)
    rru: float = 0.0
    sqs_requests: float = 0.0
    sources: Counter[str] = field(default_factory=Counter)  # "<source>:<Service.Operation>"
    # Units by the phase that spent them and where: "<phase>|wru|table:<name>", "<phase>|rru|index:<name>"
    # (phases: what Meter.phase was, or "workflow" for the Step Functions integrations' calls).
    by_phase: Counter[str] = field(default_factory=Counter)

    @property
    def total_wru(self) -> float:
        """Every WRU: base tables, indexes and the transactional surcharge."""
        # "table:<name>" entries split "table" by table; they are not billed a second time.
        return float(sum(v for k, v in self.wru.items() if not k.startswith("table:")))

    def copy(self) -> Usage:
        """An independent copy."""
        return Usage(
            Counter(self.calls),
            Counter(self.wru),
            self.rru,
            self.sqs_requests,
            Counter(self.sources),
            Counter(self.by_phase),
        )

    def __sub__(self, other: Usage) -> Usage:
        calls = Counter(self.calls)
        calls.subtract(other.calls)
        wru = Counter(self.wru)
        wru.subtract(other.wru)
        sources = Counter(self.sources)
        sources.subtract(other.sources)
        by_phase = Counter(self.by_phase)
        by_phase.subtract(other.by_phase)
        return Usage(
            calls, wru, self.rru - other.rru, self.sqs_requests - other.sqs_requests, sources, by_phase
        )

    def scaled(self, factor: float) -> dict[str, Any]:
        """A JSON-able view with every amount multiplied by `factor` (e.g. 1 / runs)."""
        return {
            "calls": {op: n * factor for op, n in sorted(self.calls.items()) if n},
            "wru": {part: n * factor for part, n in sorted(self.wru.items()) if n},
            "dynamodb_wru": self.total_wru * factor,
            "dynamodb_rru": self.rru * factor,
            "sqs_requests": self.sqs_requests * factor,
            "calls_by_source": {op: n * factor for op, n in sorted(self.sources.items()) if n},
            "by_phase": {part: n * factor for part, n in sorted(self.by_phase.items()) if n},
        }


# -- the meter ------------------------------------------------------------------------------------------


class Meter:
    """Bills every DynamoDB and SQS request made by the clients of the sessions it is attached to.

    `reader` is a DynamoDB client on a session the meter is NOT attached to for billing (attach it
    with `serialise` only): it reads items before and after each write. `tables` maps table names to
    their shapes. Calls made by clients attached with a `source` are also counted per source
    (e.g. "app" for jobsched's own clients, "sfn" for the Step Functions integrations' calls).
    """

    def __init__(self, *, tables: Mapping[str, TableShape], reader: Any) -> None:
        self.tables = dict(tables)
        self.reader = reader
        self.lock = threading.RLock()
        self.usage = Usage()
        # Which part of jobsched is calling (set by the harness around each piece: "dispatch", "run",
        # "api"); the Step Functions integrations' calls are "workflow" whatever it is.
        self.phase = "other"
        # Per thread: time spent inside the meter (to take out of timings) and inside the calls
        # themselves (moto), as [thread CPU seconds, wall seconds].
        self.hook_time: dict[int, list[float]] = {}
        self.call_time: dict[int, list[float]] = {}
        self._mutex = threading.Lock()

    # -- wiring ----------------------------------------------------------------------------------
    def attach(self, session: Any, *, source: str) -> None:
        """Bill every call of the clients `session` creates from now on (a boto3 or botocore session)."""
        events = _events_of(session)
        events.register("before-parameter-build", self._params)
        # before-call handlers must answer None: anything else would stand in for the response.
        events.register("before-call", functools.partial(self._before, source))
        events.register("after-call", functools.partial(self._after, source))
        events.register("after-call-error", self._release)

    def serialise(self, session: Any) -> None:
        """Only take the meter's lock around the calls of `session`'s clients (no billing)."""
        events = _events_of(session)
        events.register("before-call", self._acquire)
        events.register("after-call", self._release)
        events.register("after-call-error", self._release)

    def snapshot(self) -> Usage:
        """A copy of everything billed so far."""
        with self._mutex:
            return self.usage.copy()

    # -- hooks ---------------------------------------------------------------------------------------
    @staticmethod
    def _params(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["bench_params"] = params

    def _acquire(self, **_: Any) -> None:
        self.lock.acquire()

    def _release(self, **_: Any) -> None:
        self.lock.release()

    def _before(self, source: str, model: Any, context: dict[str, Any], **_: Any) -> None:
        start = clocks()
        self.lock.acquire()
        try:
            if model.service_model.service_id == "DynamoDB":
                context["bench_old"] = self._read_targets(model.name, context.get("bench_params", {}))
        except BaseException:
            self.lock.release()  # the call is abandoned: no after-call will release it
            raise
        finally:
            add_time(self.hook_time, start)
        context["bench_sent"] = clocks()

    def _after(
        self, source: str, model: Any, parsed: Mapping[str, Any], context: dict[str, Any], **_: Any
    ) -> None:
        start = clocks()
        if "bench_sent" in context:
            add_time(self.call_time, context["bench_sent"], until=start)
        try:
            self._bill(source, model, parsed, context)
        finally:
            self.lock.release()
            add_time(self.hook_time, start)

    # -- billing ---------------------------------------------------------------------------------------
    def _bill(self, source: str, model: Any, parsed: Mapping[str, Any], context: dict[str, Any]) -> None:
        service, op = model.service_model.service_id, model.name
        label = f"{service}.{op}"
        params: dict[str, Any] = context.get("bench_params", {})
        error = (parsed.get("Error") or {}).get("Code")
        bill = Usage()
        bill.calls[label] += 1
        if service == "DynamoDB":
            self._bill_dynamodb(op, params, parsed, error, context.get("bench_old") or {}, bill)
        elif service == "SQS":
            bill.sqs_requests += _sqs_requests(op, params)
        phase = "workflow" if source == "sfn" else self.phase
        for part, units in bill.wru.items():
            if part.startswith(("table:", "index:")):
                bill.by_phase[f"{phase}|wru|{part}"] += units
        for part, units in bill.by_phase.copy().items():
            if part.startswith("rru|"):
                del bill.by_phase[part]
                bill.by_phase[f"{phase}|{part}"] += units
        with self._mutex:
            self.usage.calls.update(bill.calls)
            self.usage.wru.update(bill.wru)
            self.usage.rru += bill.rru
            self.usage.sqs_requests += bill.sqs_requests
            self.usage.sources[f"{source}:{label}"] += 1
            self.usage.by_phase.update(bill.by_phase)

    def _bill_dynamodb(
        self,
        op: str,
        params: Mapping[str, Any],
        parsed: Mapping[str, Any],
        error: str | None,
        old: Mapping[int, tuple[TableShape, dict[str, Any], dict[str, Any] | None]],
        bill: Usage,
    ) -> None:
        if op in _WRITES or op == "TransactWriteItems" or op == "BatchWriteItem":
            factor = 2 if op == "TransactWriteItems" else 1
            refused = error in {"ConditionalCheckFailedException", "TransactionCanceledException"}
            if error and not refused:
                return  # validation errors, throttles: not billed
            for i, (shape, key, before) in old.items():
                if refused or (op == "TransactWriteItems" and _is_condition_check(params, i)):
                    write = (
                        bill_refused_write(before)
                        if refused
                        else WriteBill(table=write_units(item_size(before)))
                    )
                else:
                    write = bill_write(shape, before, self._get(shape, key))
                bill.wru["table"] += write.table
                bill.wru[f"table:{shape.name}"] += write.table  # per table, for the capacity plan
                for index, index_units in write.indexes.items():
                    bill.wru[f"index:{index}"] += index_units
                if factor == 2:
                    bill.wru["transaction"] += write.total
            return
        if error:
            return

        def read(part: str, units: float) -> None:
            bill.rru += units
            bill.by_phase[f"rru|{part}"] += units  # type: ignore[assignment]  # float units in a Counter; the phase is added by _bill

        if op == "GetItem":
            shape = self.tables[params["TableName"]]
            item = parsed.get("Item")
            if "ProjectionExpression" in params or "AttributesToGet" in params:
                item = self._get(shape, params["Key"])
            units = read_units(item_size(item), consistent=bool(params.get("ConsistentRead")))
            read(f"table:{shape.name}", units)
        elif op in {"Query", "Scan"}:
            where = (
                f"index:{params['IndexName']}" if params.get("IndexName") else f"table:{params['TableName']}"
            )
            read(where, self._query_units(op, params, parsed))
        elif op == "BatchGetItem":
            for table, items in (parsed.get("Responses") or {}).items():
                consistent = bool(params["RequestItems"][table].get("ConsistentRead"))
                read(f"table:{table}", sum(read_units(item_size(i), consistent=consistent) for i in items))
        elif op == "TransactGetItems":
            for entry in params.get("TransactItems", []):
                get = entry["Get"]
                item = self._get(self.tables[get["TableName"]], get["Key"])
                read(f"table:{get['TableName']}", 2 * read_units(item_size(item), consistent=True))

    def _query_units(self, op: str, params: Mapping[str, Any], parsed: Mapping[str, Any]) -> float:
        shape = self.tables[params["TableName"]]
        index = shape.index(params["IndexName"]) if params.get("IndexName") else None
        items = parsed.get("Items", [])
        narrowed = any(k in params for k in ("FilterExpression", "ProjectionExpression", "AttributesToGet"))
        if narrowed or params.get("Select") in {"COUNT", "SPECIFIC_ATTRIBUTES"}:
            # Billed on every item read before the filter, whole (or whole index entries): read again.
            items = self._reread(op, params)
        size = 0
        for item in items:
            size += item_size(shape.entry(index, item) if index else item)
        consistent = bool(params.get("ConsistentRead")) and index is None
        return read_units(size, consistent=consistent)

    def _reread(self, op: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        drop = {"FilterExpression", "ProjectionExpression", "AttributesToGet", "Select"}
        kwargs = {k: v for k, v in params.items() if k not in drop}
        used = " ".join(str(kwargs.get(k, "")) for k in ("KeyConditionExpression",))
        if "ExpressionAttributeNames" in kwargs:
            names = {k: v for k, v in kwargs["ExpressionAttributeNames"].items() if k in used}
            kwargs["ExpressionAttributeNames"] = names
            if not names:
                del kwargs["ExpressionAttributeNames"]
        if "ExpressionAttributeValues" in kwargs:
            values = {k: v for k, v in kwargs["ExpressionAttributeValues"].items() if k in used}
            kwargs["ExpressionAttributeValues"] = values
            if not values:
                del kwargs["ExpressionAttributeValues"]
        call = self.reader.query if op == "Query" else self.reader.scan
        return list(call(**kwargs).get("Items", []))

    # -- reads of the items a write targets ---------------------------------------------------------
    def _read_targets(
        self, op: str, params: Mapping[str, Any]
    ) -> dict[int, tuple[TableShape, dict[str, Any], dict[str, Any] | None]]:
        targets: list[tuple[str, dict[str, Any]]] = []
        if op == "PutItem":
            targets.append((params["TableName"], self.tables[params["TableName"]].key_of(params["Item"])))
        elif op in {"UpdateItem", "DeleteItem"}:
            targets.append((params["TableName"], dict(params["Key"])))
        elif op == "TransactWriteItems":
            for entry in params.get("TransactItems", []):
                ((kind, body),) = entry.items()
                shape = self.tables[body["TableName"]]
                key = shape.key_of(body["Item"]) if kind == "Put" else dict(body["Key"])
                targets.append((body["TableName"], key))
        elif op == "BatchWriteItem":
            for table, requests in params.get("RequestItems", {}).items():
                for request in requests:
                    if "PutRequest" in request:
                        targets.append((table, self.tables[table].key_of(request["PutRequest"]["Item"])))
                    else:
                        targets.append((table, dict(request["DeleteRequest"]["Key"])))
        out = {}
        for i, (table, key) in enumerate(targets):
            shape = self.tables[table]
            out[i] = (shape, key, self._get(shape, key))
        return out

    def _get(self, shape: TableShape, key: Mapping[str, Any]) -> dict[str, Any] | None:
        item = self.reader.get_item(TableName=shape.name, Key=dict(key), ConsistentRead=True).get("Item")
        return dict(item) if item else None


def clocks() -> tuple[float, float]:
    """(this thread's CPU seconds, wall seconds): CPU time is what a busy shared machine leaves intact."""
    return time.thread_time(), time.perf_counter()


_TIMES = threading.Lock()


def add_time(
    totals: dict[int, list[float]], start: tuple[float, float], until: tuple[float, float] | None = None
) -> None:
    """Add the time since `start` (or up to `until`) to this thread's [CPU, wall] totals."""
    end = until or clocks()
    with _TIMES:
        mine = totals.setdefault(threading.get_ident(), [0.0, 0.0])
        mine[0] += end[0] - start[0]
        mine[1] += end[1] - start[1]


def time_of(totals: dict[int, list[float]], thread: int | None) -> list[float]:
    """[CPU, wall] seconds of one thread's totals, or of every thread's (None)."""
    with _TIMES:
        if thread is not None:
            return list(totals.get(thread, [0.0, 0.0]))
        return [sum(t[0] for t in totals.values()), sum(t[1] for t in totals.values())]


def _is_condition_check(params: Mapping[str, Any], i: int) -> bool:
    items = params.get("TransactItems", [])
    return i < len(items) and "ConditionCheck" in items[i]


def _sqs_requests(op: str, params: Mapping[str, Any]) -> int:
    """SQS bills every 64 KB chunk of a send's payload as a request."""
    if op not in _SENDS:
        return 1
    entries = params.get("Entries", []) if op == "SendMessageBatch" else [params]
    payload = 0
    for entry in entries:
        payload += len(str(entry.get("MessageBody", "")).encode())
        for name, attribute in (entry.get("MessageAttributes") or {}).items():
            payload += len(name.encode()) + len(str(attribute.get("DataType", "")).encode())
            payload += _blob_size(attribute.get("StringValue") or attribute.get("BinaryValue") or b"")
    return max(1, math.ceil(payload / SQS_CHUNK_BYTES))


def _events_of(session: Any) -> Any:
    meta = getattr(session, "meta", None)
    if meta is not None and hasattr(meta, "events"):  # a client (e.g. one built on assumed credentials)
        return meta.events
    inner = getattr(session, "_session", session)  # boto3.Session wraps a botocore session
    return inner.get_component("event_emitter")
