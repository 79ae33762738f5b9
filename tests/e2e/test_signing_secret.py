"""The signing-secret endpoints over HTTP against `jobsched local`: per tenant, created on first use,
rotated, and the OpenAPI document lists both."""

from __future__ import annotations

import re
from datetime import datetime

import pytest

from tests.e2e.conftest import Stack

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def test_a_tenant_reads_its_signing_secret_created_on_first_use_and_rotates_it(stack: Stack) -> None:
    # Given two tenants that never asked for a secret
    # When the first reads its secret twice, the second reads its own, and the first rotates
    first = stack.get("/api/signing-secret", **{"X-Tenant": "signer-a"})
    again = stack.get("/api/signing-secret", **{"X-Tenant": "signer-a"})
    other = stack.get("/api/signing-secret", **{"X-Tenant": "signer-b"})
    rotated = stack.post("/api/signing-secret/rotate", None, **{"X-Tenant": "signer-a"})
    after = stack.get("/api/signing-secret", **{"X-Tenant": "signer-a"})

    # Then each answer is 200 {"secret", "created_at"}: one secret per tenant, replaced by the rotation
    for answer in (first, again, other, rotated, after):
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert set(body) == {"secret", "created_at"}
        assert re.fullmatch(r"[0-9a-f]{64}", body["secret"])
        assert datetime.fromisoformat(body["created_at"]).utcoffset() is not None
    assert again.json() == first.json()
    assert other.json()["secret"] != first.json()["secret"]
    assert rotated.json()["secret"] != first.json()["secret"]
    assert after.json() == rotated.json()
    assert stack.get("/api/signing-secret", **{"X-Tenant": "signer-b"}).json() == other.json()


def test_the_openapi_document_lists_the_signing_secret_operations(stack: Stack) -> None:
    paths = stack.get("/api/openapi.json").json()["paths"]

    assert "get" in paths["/api/signing-secret"]
    assert "post" in paths["/api/signing-secret/rotate"]
    schema = paths["/api/signing-secret"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert schema["$ref"].endswith("/SigningSecretView")
