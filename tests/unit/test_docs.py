"""The README and the docs site: short README, no dead relative link, and the
README's test command is the one CI runs. (`mkdocs build --strict` runs in
CI, not here.)"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
CI = ROOT / ".ci" / "run"

TEST_COMMAND_START = 'pip install -e ".[test]"'

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"`+[^`\n]*`+")
_LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def _prose(text: str) -> str:
    """The text outside fenced code blocks and code spans."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def relative_links(text: str) -> list[str]:
    """Every link target in markdown prose that is not a URL or a bare anchor."""
    return [
        target
        for target in _LINK.findall(_prose(text))
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target) and not target.startswith("#")
    ]


def slug(heading: str) -> str:
    """A heading's anchor, as GitHub and Python-Markdown's toc both make it
    for the headings these pages use."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return re.sub(r"[ ]+", "-", text.strip())


def anchors(path: Path) -> set[str]:
    found = set()
    for line in _FENCE.sub("", path.read_text()).splitlines():
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*$", line)
        if match:
            found.add(slug(match.group(1)))
    return found


def dead_links(page: Path) -> list[str]:
    """The relative links of `page` whose file (or heading) does not exist."""
    dead = []
    for target in relative_links(page.read_text()):
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve()
        if not resolved.exists() or (
            anchor and resolved.suffix == ".md" and anchor not in anchors(resolved)
        ):
            dead.append(target)
    return dead


def _command(line: str) -> str:
    """A shell line without its comment and trailing `|| exit`."""
    command = line.split("#", 1)[0].strip()
    return command.removesuffix("|| exit").strip()


def ci_test_command() -> str:
    (line,) = [x for x in CI.read_text().splitlines() if x.startswith(TEST_COMMAND_START)]
    return _command(line)


def test_the_readme_is_short() -> None:
    lines = README.read_text().count("\n")
    assert lines < 300, f"README.md has {lines} lines; the rest belongs under docs/"


def test_every_relative_link_points_to_a_file_that_exists() -> None:
    dead = {str(p.relative_to(ROOT)): dead_links(p) for p in _pages()}
    assert {page: links for page, links in dead.items() if links} == {}


def test_a_dead_link_is_caught(tmp_path: Path) -> None:
    """The check sees a missing file and a missing heading (so the test
    above can fail), and ignores URLs, code and links that resolve."""
    (tmp_path / "there.md").write_text("# Title\n\n## A `code` heading: yes\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md) [ok](there.md#a-code-heading-yes) [web](https://example.com)\n"
        "[gone](missing.md) [no heading](there.md#nope) [gone too](missing.md#x)\n"
        "`[code](nowhere.md)`\n"
        "```\n[fenced](nowhere.md)\n```\n"
    )
    assert dead_links(page) == ["missing.md", "there.md#nope", "missing.md#x"]


def test_every_docs_page_is_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    missing = [
        str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md") if str(p.relative_to(DOCS)) not in nav
    ]
    assert missing == []


def test_the_readme_test_command_is_the_one_ci_runs() -> None:
    """CI runs the README's test command word for word: the README's first
    code block holds exactly two commands, the second of them that one, and
    every other place the README or the docs give it says the same."""
    ci = ci_test_command()
    assert ci == 'pip install -e ".[test]" && npm ci && python -m pytest'
    readme = README.read_text()
    first_block = re.search(r"^```bash\n(.*?)^```", readme, re.MULTILINE | re.DOTALL)
    assert first_block is not None
    commands = first_block.group(1).splitlines()
    assert len(commands) == 2
    assert _command(commands[1]) == ci
    for page in _pages():
        for line in page.read_text().splitlines():
            if line.startswith(TEST_COMMAND_START) and "&&" in line:
                assert _command(line) == ci, f"{page.relative_to(ROOT)}: {line}"
