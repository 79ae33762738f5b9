"""The SSRF table (tests/unit/targets/ssrf_table.py) holds to the issue's rules, row by row."""

from __future__ import annotations

import pytest

from tests.unit.targets.ssrf_table import CASES, Row, table


@pytest.mark.parametrize("row", table(), ids=[case[0] for case in CASES])
def test_each_address_kind_is_refused_or_allowed_at_create_and_at_call_as_specified(row: Row) -> None:
    # Given an address kind, when an http target names it under aws() and local(),
    # then create and call decide alike, and as the rules say
    kind, url, aws, local, as_specified = row
    assert as_specified, f"{kind} ({url}): aws() {aws}, local() {local}"
    assert aws.at_create == aws.at_call and local.at_create == local.at_call
