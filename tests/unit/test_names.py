"""docs/design.md's Names glossary: one meaning per name, and every place it points to exists."""

from __future__ import annotations

import dataclasses
import importlib
import re
from pathlib import Path
from typing import Any

import pytest

from jobsched.wiring import Services

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"
# Where a glossary path may be written from: the repo, the core package, the CDK package.
PATH_ROOTS = (ROOT, ROOT / "layers" / "core" / "jobsched", ROOT / "infra" / "jobsched_infra")
CODE = re.compile(r"`([^`]+)`")


def glossary() -> dict[str, tuple[str, str]]:
    """The Names table: name -> (what it means, where it is)."""
    text = DESIGN.read_text(encoding="utf-8")
    if "\n## Names\n" not in text:
        return {}
    section = text.split("\n## Names\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| name ")]
    cells = [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows]
    return {name.strip("`"): (means, where) for name, means, where in cells}


def _resolves(reference: str) -> bool:
    """A path under PATH_ROOTS, or a jobsched module (and attributes or model fields under it)."""
    if "/" in reference or reference.endswith(".py"):
        return any((root / reference).exists() for root in PATH_ROOTS)
    parts = reference.removeprefix("jobsched.").split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module("jobsched." + ".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            fields = getattr(found, "model_fields", {})
            found = fields[attr] if attr in fields else getattr(found, attr, None)
            if found is None:
                return False
        return True
    return False


NAMED = {"workflow", "asl", "StateMachines", "Workflows", "handler", "entry point", "store", "service"}


def test_the_glossary_gives_each_overloaded_name_one_meaning() -> None:
    # Given the Names table (one row a name)
    names = glossary()

    # Then each name that once meant two things is there, once, and a handler is no entry point
    assert set(names) >= NAMED
    assert "Lambda" in names["entry point"][0] and "job" in names["handler"][0]


@pytest.mark.parametrize("name", sorted(glossary()))
def test_every_place_the_glossary_names_exists(name: str) -> None:
    # Given a name's row: what it means, and where it is, as paths, modules and attributes
    means, where = glossary()[name]
    references = CODE.findall(where)
    services = {f.name for f in dataclasses.fields(Services)}

    # Then it says where, and every place it names resolves (a rename that leaves the glossary fails)
    assert references, f"{name}: the glossary says where, in `code`"
    assert [r for r in references if not _resolves(r)] == []
    assert [s for s in re.findall(r"`Services\.(\w+)`", means) if s not in services] == []
