"""The README and docs/: every relative link resolves to a file and, with a #fragment, to a heading in
it; the README stays a five-minute read."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
MAX_README_LINES = 220

# [text](target) or [text](target "title"); images too. Reference-style links are not used here.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, https:, mailto:, ...


def _prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (a `[x](y)` in a code sample is not a link)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup and punctuation dropped, lower case, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"[`*_]", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor the headings of a Markdown file define (a repeated heading gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for line in _prose_lines(path.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(path: Path) -> list[str]:
    """The relative links of a Markdown file that name no file, or a heading its target lacks."""
    broken = []
    for line in _prose_lines(path.read_text(encoding="utf-8")):
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
            if EXTERNAL.match(target):
                continue
            file_part, _, fragment = target.partition("#")
            resolved = (path.parent / file_part).resolve() if file_part else path
            if not resolved.exists():
                broken.append(f"{path.name}: {target} (no such file)")
            elif fragment and (resolved.suffix != ".md" or fragment not in anchors(resolved)):
                broken.append(f"{path.name}: {target} (no heading #{fragment})")
    return broken


def test_the_docs_exist_and_the_readme_links_to_each() -> None:
    # Given the documents under docs/
    names = {doc.name for doc in DOCS}
    # Then the ones the README promises are there, and the README links every one of them
    assert names >= {"design.md", "api.md", "operations.md", "capacity.md", "benchmarks.md"}
    readme = README.read_text(encoding="utf-8")
    for name in names:
        assert f"](docs/{name}" in readme, name


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: p.name)
def test_every_relative_link_resolves_to_a_file_and_heading(path: Path) -> None:
    # Given a Markdown file of the project
    # When its relative links are followed
    # Then each names a file that exists, and a heading of it when it has a #fragment
    assert broken_links(path) == []


def test_the_readme_is_a_five_minute_read() -> None:
    # Given the README
    lines = README.read_text(encoding="utf-8").splitlines()
    # Then it stays about 200 lines: the pitch, quick start, the API in brief, links
    assert len(lines) <= MAX_README_LINES, len(lines)


def test_a_link_to_a_missing_file_or_heading_is_reported(tmp_path: Path) -> None:
    # Given a document with good links, a link to a missing file and one to a missing heading
    (tmp_path / "other.md").write_text("# Other\n\n## A `code` heading, too!\n", encoding="utf-8")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# Doc\n\n## Here\n\n"
        "[ok](other.md) [ok](other.md#a-code-heading-too) [ok](#here) [web](https://example.com/x)\n"
        "[gone](missing.md) [nowhere](other.md#nope)\n"
        "```\n[in code](ignored.md)\n```\n",
        encoding="utf-8",
    )
    # When its links are checked
    # Then exactly the two broken ones are reported
    assert broken_links(doc) == [
        "doc.md: missing.md (no such file)",
        "doc.md: other.md#nope (no heading #nope)",
    ]
