"""The docs a newcomer reads stay trustworthy, checked cheaply (text only, no process).

docs/benchmarks.md holds the current figures only: under 300 lines, every section with the
command that reproduces it and the date it was measured; older figures live in
docs/history/, one file per issue, every one reachable from benchmarks.md. Every relative
link and image in README.md and docs/ (history included) names a file that exists, and a
heading that exists when it names one (GitHub's anchors). Every plot in docs/img is shown
somewhere. O(total size of the docs).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
BENCHMARKS = DOCS / "benchmarks.md"
HISTORY = DOCS / "history"
MAX_BENCHMARK_LINES = 300
SECTIONS_WITHOUT_FIGURES = {"History"}     # benchmarks.md sections that only link elsewhere

# a runnable command: a repository script, a module or one-liner, or an installed entry point
COMMAND = re.compile(r"(?:^|[`\s])(?:sudo )?(?:python3? (?:scripts/\S+\.py|-m \S+|-c )"
                     r"|netstorm-(?:launch|bench|wan|keygen)\b)")
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`[^`]*`")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)     # http:, https:, mailto:, ...


def doc_files() -> list:
    """README.md and every Markdown file under docs/, history included."""
    return [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]


def prose(text: str) -> str:
    """``text`` with fenced code blocks and inline code blanked out, lines kept in place
    (so a match's line number is the count of newlines before it)."""
    out, in_fence = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            out.append("")
        else:
            out.append("" if in_fence else line)
    return INLINE_CODE.sub("``", "\n".join(out))


def link_targets(text: str) -> list:
    """(line number, target) of every Markdown link and image in ``text``'s prose; the
    link's text may span lines."""
    body = prose(text)
    return [(body.count("\n", 0, match.start()) + 1, match.group(1))
            for match in LINK.finditer(body)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: links reduced to their text, lower case,
    every character but letters, digits, '_', '-' and spaces dropped, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set:
    """Every anchor a link may name in ``path``: its headings' slugs (repeats numbered
    -1, -2, ... as GitHub does) and explicit <a name/id> anchors."""
    found, seen = set(), {}
    text = path.read_text(encoding="utf-8")
    in_fence = False
    for line in text.splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        found.update(HTML_ANCHOR.findall(line))
    return found


def benchmark_sections() -> list:
    """(title, text) of every '## ' section of docs/benchmarks.md."""
    sections, title, body = [], None, []
    for line in BENCHMARKS.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            if title is not None:
                sections.append((title, "\n".join(body)))
            title, body = line[3:].strip(), []
        elif title is not None:
            body.append(line)
    if title is not None:
        sections.append((title, "\n".join(body)))
    return sections


def broken_links(path: Path) -> list:
    """'file:line: target (reason)' for each relative link or image of ``path`` whose file
    or anchor does not exist."""
    problems = []
    for number, target in link_targets(path.read_text(encoding="utf-8")):
        if EXTERNAL.match(target):
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(REPO)}:{number}: {target}"
        if not resolved.exists():
            problems.append(f"{where} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(f"{where} (no such heading)")
    return problems


def test_benchmarks_md_is_under_300_lines():
    lines = BENCHMARKS.read_text(encoding="utf-8").count("\n")
    assert lines < MAX_BENCHMARK_LINES, (
        f"docs/benchmarks.md has {lines} lines: move superseded figures to docs/history/")


def test_every_benchmarks_section_names_a_command_and_a_date():
    sections = benchmark_sections()
    assert len(sections) >= 5, "docs/benchmarks.md lost its sections"
    missing = [f"{title}: {what}" for title, text in sections
               if title not in SECTIONS_WITHOUT_FIGURES
               for what, pattern in (("no command", COMMAND), ("no date", DATE))
               if not pattern.search(text)]
    assert not missing, "docs/benchmarks.md sections without a command or a date:\n" + \
        "\n".join(missing)


def test_every_history_file_is_linked_from_benchmarks_md_and_framed():
    files = sorted(HISTORY.glob("issue-*.md"))
    assert files, "docs/history/ holds no issue file"
    linked = {Path(target.partition("#")[0]).name
              for _, target in link_targets(BENCHMARKS.read_text(encoding="utf-8"))
              if target.startswith("history/")}
    unlinked = [f.name for f in files if f.name not in linked]
    assert not unlinked, f"history files docs/benchmarks.md does not link to: {unlinked}"
    unframed = [f.name for f in files
                if not (f.read_text(encoding="utf-8").startswith("# Issue ")
                        and DATE.search(f.read_text(encoding="utf-8")[:600]))]
    assert not unframed, f"history files without an 'Issue' title and a date: {unframed}"


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_and_images_resolve(path):
    problems = broken_links(path)
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_every_plot_in_docs_img_is_shown():
    shown = {(path.parent / target.partition("#")[0]).resolve()
             for path in doc_files()
             for _, target in link_targets(path.read_text(encoding="utf-8"))
             if not EXTERNAL.match(target)}
    orphans = [p.name for p in sorted((DOCS / "img").glob("*.png")) if p.resolve() not in shown]
    assert not orphans, f"plots in docs/img that no doc shows: {orphans}"


def test_the_link_checker_catches_what_it_should(tmp_path, monkeypatch):
    """The checks can fail: a missing file, a missing heading and a missing image are
    reported; external links, code and existing anchors are not."""
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    (tmp_path / "a.md").write_text("# Time to accuracy ×2\n\n## Repeat\n## Repeat\n",
                                   encoding="utf-8")
    doc = tmp_path / "b.md"
    doc.write_text("[ok](a.md#time-to-accuracy-2) [ok](a.md#repeat-1) [web](https://x.y/z)\n"
                   "`[code](nowhere.md)`\n```\n[fenced](nowhere.md)\n```\n"
                   "[gone](missing.md) [bad](a.md#nope) ![img](img/none.png) [self](#top)\n"
                   "[a link\nover two lines](a.md#neither)\n",
                   encoding="utf-8")
    problems = broken_links(doc)
    assert [p.split(": ", 1)[1] for p in problems] == [
        "missing.md (no such file)", "a.md#nope (no such heading)",
        "img/none.png (no such file)", "#top (no such heading)",
        "a.md#neither (no such heading)"]
    assert problems[-1].startswith("b.md:7: ")
