"""The docs' cross-references resolve: every relative link in README.md and docs/**/*.md
names a file that exists, and every place in the code, tests, experiments, benchmarks or
docs that cites a docs page's section by its title (``docs/RESULTS.md, "Title"``) names a
heading that page has. Pages get split, moved and renamed; a dangling pointer sends the
reader nowhere, and nothing else would notice it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# [text](target) and ![alt](target); the target ends at whitespace or ")"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
# docs/PAGE.md, "Title" / docs/PAGE.md ("Title" / `docs/PAGE.md`, section "Title"
CITATION = re.compile(r"(docs/[A-Za-z0-9_/.-]+\.md)`{0,2},?\s+\(?(?:section\s+)?\"([^\"]+)\"")
SOURCES = ("ragen", "tests", "experiments", "bench", "docs")
SUFFIXES = {".py", ".md", ".sh", ".yaml", ".yml", ".toml"}


def _markdown_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _normalize(title: str) -> str:
    """A title as cited across lines of a comment, a docstring or implicitly joined
    Python strings, reduced to its words."""
    title = re.sub(r"'\s*\n\s*'", "", title)  # "...Rollout '\n 'and update speed"
    title = re.sub(r"\n\s*#", " ", title)  # a title wrapped over comment lines
    title = re.sub(r"\s+", " ", title).strip()
    return title.removesuffix("...").strip()


def _headings(page: Path) -> list[str]:
    """The page's section titles: its headings, and the bold leads (``**EOS tail.**``)
    and bullet leads (``* Versions: ...``) that name a paragraph."""
    lines, in_code = [], False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif in_code:
            continue
        elif line.startswith("#"):
            lines.append(_normalize(line.lstrip("#")))
        elif line.startswith("**"):
            lines.append(_normalize(line[2:].split("**", 1)[0]))
        elif line.startswith("* ") and ":" in line:
            lines.append(_normalize(line[2:].split(":", 1)[0]))
    return lines


def test_relative_links_in_the_docs_resolve():
    broken = []
    for page in _markdown_pages():
        text = page.read_text(encoding="utf-8")
        for target in LINK.findall(text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a URL or an anchor on the same page
            path = target.split("#", 1)[0]
            if not (page.parent / path).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, "links to files that do not exist:\n" + "\n".join(broken)


def test_cited_doc_sections_exist():
    files = [ROOT / "README.md"]
    for folder in SOURCES:
        files += [p for p in (ROOT / folder).rglob("*") if p.suffix in SUFFIXES]
    missing, checked = [], 0
    for source in files:
        if "notebook" in source.parts or source == Path(__file__).resolve():
            continue  # the dated history quotes sections as they were then
        text = source.read_text(encoding="utf-8", errors="replace")
        for page_name, title in CITATION.findall(text):
            page = ROOT / page_name
            title = _normalize(title)
            checked += 1
            if not page.exists():
                missing.append(f"{source.relative_to(ROOT)}: {page_name} does not exist")
            elif not any(h.startswith(title) for h in _headings(page)):
                missing.append(f'{source.relative_to(ROOT)}: {page_name} has no section "{title}"')
    assert checked > 20, "the citation pattern found almost nothing: has it broken?"
    assert not missing, "citations of sections that do not exist:\n" + "\n".join(missing)
