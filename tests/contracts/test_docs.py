"""The documentation says only what is there: every relative link of README.md and docs/*.md
resolves (the file, and a ``#anchor`` to one of its headings), and every ``corefsearch COMMAND ...
--option`` line of their code names a command and options the command line has."""

from __future__ import annotations

import re
import unicodedata
from functools import cache
from pathlib import Path

import typer

from corefsearch.cli import app

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
PREFIX = re.compile(r"^\s*(?:\$\s+)?(?:\S*/)?(?:\.venv/bin/)?corefsearch\s+(.*)$")


# -- Markdown reading --------------------------------------------------------------------------


def split_markdown(text: str) -> tuple[list[str], list[str]]:
    """The lines outside fenced code blocks and those inside (indented blocks count as prose)."""
    prose, code, fenced = [], [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        (code if fenced else prose).append(line)
    return prose, code


def strip_inline_code(line: str) -> str:
    return INLINE_CODE.sub("", line)


def slug(heading: str, style: str) -> str:
    """The anchor of a heading: ``github``'s, or ``mkdocs``' (Python-Markdown's toc, which also
    folds runs of hyphens and drops what is not ASCII). Lower case, inline markup and punctuation
    dropped, spaces to hyphens."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[*_]{1,3}([^*_]+)[*_]{1,3}", r"\1", text)
    if style == "mkdocs":
        text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
        text = re.sub(r"[^\w\s-]", "", text).strip().lower()
        return re.sub(r"[-\s]+", "-", text)
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.strip().replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """The anchors of a page's headings that GitHub and MkDocs both give (a link to one works on
    both); a second heading of the same name gets ``_1`` on one and ``-1`` on the other, so only
    first ones count."""
    prose, _ = split_markdown(path.read_text(encoding="utf-8"))
    found = set()
    for line in prose:
        match = HEADING.match(line)
        if match and slug(match.group(2), "github") == slug(match.group(2), "mkdocs"):
            found.add(slug(match.group(2), "github"))
    return frozenset(found)


def link_problems(path: Path, root: Path = ROOT) -> list[str]:
    prose, _ = split_markdown(path.read_text(encoding="utf-8"))
    problems = []
    for line in prose:
        for target in LINK.findall(strip_inline_code(line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("//"):
                continue  # http:, https:, mailto:
            file_part, _, anchor = target.partition("#")
            where = f"{path.relative_to(root)}: ({target})"
            destination = (path.parent / file_part).resolve() if file_part else path
            if not destination.exists():
                problems.append(f"{where}: no such file {destination.relative_to(root)}")
            elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
                problems.append(f"{where}: no heading #{anchor} in {destination.relative_to(root)}")
    return problems


# -- Command lines -----------------------------------------------------------------------------


@cache
def command_tree() -> dict[tuple[str, ...], frozenset[str]]:
    """Every command path of the CLI (``("train", "reader")``) with its option names; groups too."""
    tree: dict[tuple[str, ...], frozenset[str]] = {}

    def walk(command, path: tuple[str, ...]) -> None:
        names = {"--help"}
        for param in command.params:
            names.update(o for o in (*param.opts, *param.secondary_opts) if o.startswith("--"))
        tree[path] = frozenset(names)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, (*path, name))

    walk(typer.main.get_command(app), ())
    return tree


def command_lines(text: str) -> list[str]:
    """The ``corefsearch ...`` command lines of a Markdown text: code block lines (continuations
    joined) and inline code spans, each cut at a shell comment, pipe, ``&&`` or ``;``."""
    prose, code = split_markdown(text)
    joined, pending = [], ""
    for line in code:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        joined.append(pending + line)
        pending = ""
    candidates = [line for line in joined if PREFIX.match(line)]
    candidates += [m.group(2) for line in prose for m in INLINE_CODE.finditer(line) if PREFIX.match(m.group(2))]
    lines = []
    for line in candidates:
        line = re.split(r"\s#|\s\|\s|&&|;|\s>", line)[0]  # the rest is another command, or a comment
        lines.append(" ".join(line.split()))
    return lines


def command_problems(line: str) -> list[str]:
    """What is wrong with one ``corefsearch ...`` line: an unknown command, or options the
    command does not have. Placeholders (``COMMAND``) and alternatives (``train reader|retriever``)
    are read as such."""
    tree = command_tree()
    words = PREFIX.match(line).group(1).split()
    paths: list[tuple[str, ...]] = [()]
    for word in words:
        if word.startswith("-") or not any(len(q) > len(p) and q[: len(p)] == p for p in paths for q in tree):
            break  # a command, not a group: the rest are its arguments and options
        if word.isupper():
            return []  # `corefsearch COMMAND --help`: a placeholder for any command
        alternatives = word.split("|")
        unknown = [a for a in alternatives if not any(p + (a,) in tree for p in paths)]
        if unknown:
            return [f"{line!r}: no command {' '.join((*paths[0], u))!r}" for u in unknown]
        paths = [p + (a,) for p in paths for a in alternatives if p + (a,) in tree]
    options = set(OPTION.findall(" ".join(words)))
    problems = []
    for option in sorted(options):
        if not any(option in tree[p] for p in paths):
            problems.append(f"{line!r}: {' '.join(('corefsearch', *paths[0]))} has no option {option}")
    return problems


# -- The tests ---------------------------------------------------------------------------------


def test_relative_links_resolve() -> None:
    problems = [problem for path in DOCS for problem in link_problems(path)]
    assert not problems, "links that lead nowhere:\n" + "\n".join(problems)


def test_named_commands_and_options_exist() -> None:
    problems = []
    for path in DOCS:
        for line in command_lines(path.read_text(encoding="utf-8")):
            problems += [f"{path.relative_to(ROOT)}: {p}" for p in command_problems(line)]
    assert not problems, "command lines the CLI does not have:\n" + "\n".join(problems)


def test_the_checks_can_fail(tmp_path: Path) -> None:
    text = "\n".join([
        "```bash",
        "corefsearch search --index I --queries Q \\",
        "    --out R --no-such-option 3 | grep --count x",
        "$ corefsearch no-such-command --out X",
        "corefsearch train nothing --out X",
        "corefsearch COMMAND --help",
        "corefsearch train retriever|reader --out M --run R",  # --run: an option of one of them
        "```",
        "Then `corefsearch query --index I --mention m --threads 2` and `corefsearch index D --out I --fields`.",
    ])
    problems = [p for line in command_lines(text) for p in command_problems(line)]
    assert len(problems) == 4, problems
    assert "corefsearch search has no option --no-such-option" in problems[0]
    assert "no command 'no-such-command'" in problems[1]
    assert "no command 'train nothing'" in problems[2]
    assert "corefsearch query has no option --threads" in problems[3]  # `search` has it, `query` not
    assert not any("--count" in p for p in problems)

    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("# A page\n\n## Many machines: `--ray`\n", encoding="utf-8")
    page.write_text(
        "[ok](there.md#a-page) [both](there.md#many-machines---ray) [bad anchor](there.md#nowhere) [gone](missing.md) "
        "![img](there.md) [web](https://example.org) `[not a link](missing2.md)`\n",
        encoding="utf-8",
    )
    found = link_problems(page, root=tmp_path)
    assert len(found) == 3, found  # `--ray`: GitHub's anchor is not MkDocs' (many-machines-ray)
    assert "#many-machines---ray" in found[0]
    assert "no heading #nowhere" in found[1] and "no such file missing.md" in found[2]
