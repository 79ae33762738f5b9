"""The SSRF guard of the http target: where a URL may lead, decided on the addresses it resolves to.

    url ──> host ──getaddrinfo (once)──> every address vetted ──> connect to the first, pinned
                                          │ any refused: AddressRefused (final)

One lookup per call, and the connection goes to the vetted address itself (the Host header and
TLS SNI still carry the name): a name that resolves to a public address for the check and to
169.254.169.254 for the connect (DNS rebinding) never gets the second lookup it needs. A name with
several addresses is refused if any of them is: the resolver, not jobsched, picks which one a
later connect would use.

What is refused (AddressPolicy):
- always: link-local and metadata addresses (169.254.0.0/16, fe80::/10, fd00:ec2::254, IPv4-mapped
  forms of them) and the metadata names (jobsched.domain.targets.metadata_reason);
- unless allow_private (off on AWS): loopback, the private ranges (10/8, 172.16/12, 192.168/16),
  unique-local fc00::/7, shared 100.64/10, unspecified, multicast, reserved: every address that is
  not globally routable;
- unless allow_http (off on AWS): plain http.
The local stack allows both: it runs on the developer's machine, whose webhooks listen on loopback.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from jobsched.domain.targets import (
    ADDRESS_REFUSED,
    FinalTargetFailure,
    TargetFailed,
    address_literal,
    is_metadata,
    metadata_reason,
)

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Sequence[str]]
"""(host, port) -> the addresses the host resolves to, as text; raises OSError when it does not."""


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    """Which destinations an http target may reach besides public https ones (see the module doc)."""

    allow_private: bool = False
    """Loopback, private, unique-local and other non-global addresses."""
    allow_http: bool = False
    """Plain http (no TLS)."""

    @classmethod
    def aws(cls) -> AddressPolicy:
        """The default on AWS: public https only."""
        return cls()

    @classmethod
    def local(cls) -> AddressPolicy:
        """The local stack: http to loopback and private addresses too."""
        return cls(allow_private=True, allow_http=True)


@dataclass(frozen=True, slots=True)
class Destination:
    """A vetted URL: connect to `address`, present `host` (Host header, SNI, certificate name)."""

    scheme: str
    host: str
    port: int
    address: str
    target: str
    """The request target: path and query."""

    @property
    def origin(self) -> tuple[str, str, int]:
        """(scheme, host, port): what a redirect must keep to be followed."""
        return self.scheme, self.host, self.port


def system_resolve(host: str, port: int) -> list[str]:
    """The host's addresses from the system resolver, in its order, without duplicates."""
    found: list[str] = []
    try:
        answers = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except UnicodeError as exc:  # a name IDNA cannot encode resolves to nothing, as a lookup failure
        raise OSError(f"{host} is not a valid host name: {exc}") from exc
    for *_, sockaddr in answers:
        address = str(sockaddr[0])
        if address not in found:
            found.append(address)
    return found


def refusal(address: IpAddress, policy: AddressPolicy) -> str | None:
    """Why `address` may not be reached under `policy`; None if it may."""
    if is_metadata(address):
        return "a link-local or metadata address"
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_global or policy.allow_private:
        return None
    return "a loopback, private or otherwise non-public address"


def vet(url: str, policy: AddressPolicy, resolve: Resolver = system_resolve) -> Destination:
    """Where a call to `url` connects; raises FinalTargetFailure (AddressRefused) when it may not.

    An unresolvable name is a TargetFailed (HTTPConnectionError): DNS may answer on a retry.
    """
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    scheme = parts.scheme
    if scheme == "http" and not policy.allow_http:
        raise FinalTargetFailure(f"{url}: plain http is not allowed here", error_type=ADDRESS_REFUSED)
    reason = metadata_reason(host)
    if reason:
        raise FinalTargetFailure(f"{host} {reason}", error_type=ADDRESS_REFUSED)
    port = parts.port or (443 if scheme == "https" else 80)
    literal = address_literal(host)
    if literal is not None:
        addresses = [str(literal)]
    else:
        try:
            addresses = list(resolve(host, port))
        except OSError as exc:
            raise TargetFailed(f"{host} does not resolve: {exc}", error_type="HTTPConnectionError") from exc
        if not addresses:
            raise TargetFailed(f"{host} does not resolve", error_type="HTTPConnectionError")
    for text in addresses:
        address = ipaddress.ip_address(text.split("%", 1)[0])
        why = refusal(address, policy)
        if why:
            raise FinalTargetFailure(
                f"{host} resolves to {address}, {why}: refused", error_type=ADDRESS_REFUSED
            )
    target = parts.path or "/"
    if parts.query:
        target = f"{target}?{parts.query}"
    return Destination(scheme=scheme, host=host, port=port, address=addresses[0], target=target)


def same_origin(destination: Destination, url: str) -> Destination | None:
    """`destination` moved to `url`'s path and query if `url` has its scheme, host and port; else None.

    A redirect within the origin keeps the vetted address (nothing is resolved again); one that
    leaves it is not followed, so its host is never even looked up.
    """
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    if (parts.scheme, (parts.hostname or "").lower(), port) != destination.origin:
        return None
    target = parts.path or "/"
    return replace(destination, target=f"{target}?{parts.query}" if parts.query else target)
