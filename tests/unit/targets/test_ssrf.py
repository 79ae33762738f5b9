"""The http target's SSRF guard (adapters/targets/ssrf.py): the address table, and no second lookup.

Resolution is played by a table (the network is blocked here): each row is one kind of address a
URL may lead to, under the AWS policy and the local stack's, and whether it is refused.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from jobsched.adapters.targets.ssrf import AddressPolicy, Destination, vet
from jobsched.domain.targets import ADDRESS_REFUSED, FinalTargetFailure, TargetFailed

AWS, LOCAL = AddressPolicy.aws(), AddressPolicy.local()

# (kind, url, what the name resolves to, refused on AWS, refused on the local stack)
TABLE: list[tuple[str, str, list[str], bool, bool]] = [
    ("public https", "https://hooks.example.com/x", ["93.184.216.34"], False, False),
    (
        "public ipv6 https",
        "https://hooks.example.com/x",
        ["2606:2800:220:1:248:1893:25c8:1946"],
        False,
        False,
    ),
    ("public plain http", "http://hooks.example.com/x", ["93.184.216.34"], True, False),
    ("metadata ipv4 literal", "https://169.254.169.254/latest/meta-data", [], True, True),
    ("ecs credentials literal", "https://169.254.170.2/v2/credentials", [], True, True),
    ("metadata ipv6 literal", "https://[fd00:ec2::254]/latest", [], True, True),
    ("ipv6 link-local literal", "https://[fe80::1]/", [], True, True),
    ("metadata v4-mapped ipv6", "https://[::ffff:169.254.169.254]/", [], True, True),
    ("metadata decimal literal", "https://2852039166/", [], True, True),
    ("metadata name", "https://instance-data.ec2.internal/", [], True, True),
    ("name resolving to metadata", "https://rebind.example.com/", ["169.254.169.254"], True, True),
    ("name resolving to v6 metadata", "https://rebind.example.com/", ["fd00:ec2::254"], True, True),
    (
        "name with one metadata address",
        "https://mixed.example.com/",
        ["93.184.216.34", "169.254.169.254"],
        True,
        True,
    ),
    ("loopback literal", "https://127.0.0.1:8443/", [], True, False),
    ("loopback name", "https://localhost:8443/", ["127.0.0.1", "::1"], True, False),
    ("loopback over http", "http://127.0.0.1:9000/hook", [], True, False),
    ("ipv6 loopback", "https://[::1]/", [], True, False),
    ("private 10/8", "https://internal.example.com/", ["10.1.2.3"], True, False),
    ("private 172.16/12", "https://internal.example.com/", ["172.20.0.5"], True, False),
    ("private 192.168/16", "https://internal.example.com/", ["192.168.1.10"], True, False),
    ("unique-local fc00::/7", "https://internal.example.com/", ["fd12:3456::1"], True, False),
    ("shared 100.64/10", "https://internal.example.com/", ["100.64.0.1"], True, False),
    ("unspecified 0.0.0.0", "https://0.0.0.0/", [], True, False),
    ("private v4-mapped ipv6", "https://[::ffff:10.0.0.1]/", [], True, False),
]


def table_resolver(addresses: list[str]) -> tuple[list[tuple[str, int]], object]:
    asked: list[tuple[str, int]] = []

    def resolve(host: str, port: int) -> Sequence[str]:
        asked.append((host, port))
        return addresses

    return asked, resolve


@pytest.mark.parametrize(
    ("kind", "url", "addresses", "refused_on_aws", "refused_locally"), TABLE, ids=[row[0] for row in TABLE]
)
@pytest.mark.parametrize("where", ["aws", "local"])
def test_it_refuses_or_allows_each_kind_of_address_as_specified(
    where: str, kind: str, url: str, addresses: list[str], refused_on_aws: bool, refused_locally: bool
) -> None:
    # Given a URL whose host resolves to one kind of address, and the AWS or the local policy
    policy, refused = (AWS, refused_on_aws) if where == "aws" else (LOCAL, refused_locally)
    asked, resolve = table_resolver(addresses)
    # When the guard vets it
    try:
        destination: Destination | None = vet(url, policy, resolve)  # type: ignore[arg-type]
        error = None
    except FinalTargetFailure as exc:
        destination, error = None, exc
    # Then it is refused (a final AddressRefused) or allowed, as the table says
    print(f"SSRF {where:5} {kind:32} {'refused' if error else 'allowed'}")
    assert (error is not None) == refused, f"{kind} on {where}"
    if error is not None:
        assert error.error_type == ADDRESS_REFUSED
    else:
        assert destination is not None
        assert destination.address == (addresses[0] if addresses else destination.address)
    assert len(asked) <= 1  # one lookup at most


def test_it_connects_to_the_vetted_address_and_keeps_the_name_for_host_and_sni() -> None:
    # Given a name that resolves to a public address once (a rebinding resolver would answer
    # 169.254.169.254 the second time)
    answers = [["93.184.216.34"], ["169.254.169.254"]]
    asked: list[str] = []

    def rebinding(host: str, port: int) -> list[str]:
        asked.append(host)
        return answers[len(asked) - 1]

    # When it is vetted
    destination = vet("https://Rebind.Example.com:8443/hook?x=1", AWS, rebinding)
    # Then the destination is the vetted address itself: nothing is left to resolve again
    assert destination == Destination(
        scheme="https", host="rebind.example.com", port=8443, address="93.184.216.34", target="/hook?x=1"
    )
    assert asked == ["rebind.example.com"]


def test_an_unresolvable_name_is_a_retryable_connection_error() -> None:
    def nxdomain(host: str, port: int) -> list[str]:
        raise OSError("Name or service not known")

    with pytest.raises(TargetFailed) as failed:
        vet("https://gone.example.com/", AWS, nxdomain)
    assert failed.value.error_type == "HTTPConnectionError"
    assert not isinstance(failed.value, FinalTargetFailure)
