"""The SSRF table: each kind of address an http target may name, under AddressPolicy.aws() and .local(),
refused or allowed at create (the API's TargetFactory.check: a 400 naming target.url) and at call
(ssrf.vet: a final AddressRefused). test_ssrf_table.py holds it to the issue's rules; print it with

    .venv/bin/python -m tests.unit.targets.ssrf_table

Names are resolved by a fixed resolver (no DNS): "rebind.example.test" answers a public address and
the metadata address, as a rebinding or poisoned DNS would.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobsched.adapters.targets import AddressPolicy, TargetFactory
from jobsched.adapters.targets.ssrf import vet
from jobsched.domain.targets import FinalTargetFailure, parse_target
from jobsched.errors import ValidationFailed
from jobsched.handlers import HandlerRegistry

NAMES = {
    "rebind.example.test": ["93.184.215.14", "169.254.169.254"],
    "public.example.test": ["93.184.215.14"],
    "intranet.example.test": ["10.20.30.40"],
}

# (kind, url, refused under aws(), refused under local()): the rules.
CASES: list[tuple[str, str, bool, bool]] = [
    ("metadata v4", "https://169.254.169.254/latest/meta-data/", True, True),
    ("metadata v4, decimal form", "https://2852039166/latest/", True, True),
    ("metadata v4, IPv4-mapped v6", "https://[::ffff:169.254.169.254]/", True, True),
    ("metadata v6", "https://[fd00:ec2::254]/latest/", True, True),
    ("metadata name", "https://metadata.google.internal/", True, True),
    ("link-local v4", "https://169.254.10.1/", True, True),
    ("link-local v6", "https://[fe80::1]/", True, True),
    ("loopback v4", "https://127.0.0.1:8443/hook", True, False),
    ("loopback v6", "https://[::1]:8443/hook", True, False),
    ("private 10/8", "https://10.0.0.1/hook", True, False),
    ("private 172.16/12", "https://172.16.0.1/hook", True, False),
    ("private 192.168/16", "https://192.168.1.1/hook", True, False),
    ("name resolving to metadata", "https://rebind.example.test/hook", True, True),
    ("name resolving to private", "https://intranet.example.test/hook", True, False),
    ("public https", "https://93.184.215.14/hook", False, False),
    ("public name, https", "https://public.example.test/hook", False, False),
    ("plain http, public", "http://93.184.215.14/hook", True, False),
    ("plain http, loopback", "http://127.0.0.1:8080/hook", True, False),
]


def resolve(host: str, port: int) -> list[str]:
    if host not in NAMES:
        raise OSError(f"{host}: no such name")
    return NAMES[host]


@dataclass(frozen=True)
class Decision:
    """What one URL met under one policy: at create and at call ("refused" or "allowed")."""

    at_create: str
    at_call: str


def decide(url: str, policy: AddressPolicy) -> Decision:
    """Try `url` at create (spec validation, then the policy's check) and at call (vet)."""
    factory = TargetFactory(
        handlers=HandlerRegistry(), roles=None, signing_secret=lambda t: "s", policy=policy, resolve=resolve
    )
    try:
        factory.check(parse_target({"type": "http", "url": url}))
        at_create = "allowed"
    except ValidationFailed as exc:
        assert exc.field == "target.url", exc.field
        at_create = "refused"
    try:
        vet(url, policy, resolve)
        at_call = "allowed"
    except FinalTargetFailure as exc:
        assert exc.error_type == "AddressRefused"
        at_call = "refused"
    return Decision(at_create, at_call)


Row = tuple[str, str, Decision, Decision, bool]


def table() -> list[Row]:
    """(kind, url, under aws(), under local(), as the rules say) per case."""
    rows = []
    for kind, url, aws_refused, local_refused in CASES:
        aws, local = decide(url, AddressPolicy.aws()), decide(url, AddressPolicy.local())
        expected = aws == Decision(
            *(["refused"] * 2 if aws_refused else ["allowed"] * 2)
        ) and local == Decision(*(["refused"] * 2 if local_refused else ["allowed"] * 2))
        rows.append((kind, url, aws, local, expected))
    return rows


def main() -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    out = Table(title="http target SSRF guard: create (400 target.url) / call (AddressRefused)")
    for column in ("address kind", "url", "aws()", "local()", "as specified"):
        out.add_column(column)
    for kind, url, aws, local, ok in table():
        out.add_row(
            kind,
            escape(url),
            f"{aws.at_create} / {aws.at_call}",
            f"{local.at_create} / {local.at_call}",
            "yes" if ok else "NO",
        )
    Console().print(out)


if __name__ == "__main__":
    main()
