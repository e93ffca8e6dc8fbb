"""Keep the README's and docs' result tables generated: copy report files into marked blocks.

    <!-- generated from reports/baselines_beam100k/report.md -->
    ...replaced by the file's content (its headings pushed two levels down)...
    <!-- end generated -->

`python -m experiments.tools.readme_sync` rewrites the blocks of README.md and docs/*.md; `--check` exits 1
when one is out of date (a test runs it), so a table in the docs is always the one a command wrote.
Headings move down two levels in README.md (blocks sit under `###`) and one level in docs/; relative
links and images of the report (its plots) are rebased so they still resolve from the document.
A block `<!-- generated headline from reports/X/report.md -->` holds only links to the report (Markdown,
HTML) and its headline table (the one under "Variants × metrics"): docs/results.md is such a page, so
each result is stored once, in its report. A block `<!-- generated: variants -->` lists
conf/variant/*.yaml with the first sentence of each file's comment and its stages in the order they run.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
from pathlib import Path

from experiments import PROJECT_ROOT
from experiments.configure.compose import CONF_DIR, compose_config

ROOT = PROJECT_ROOT
BLOCK = re.compile(
    r"(?P<open><!-- generated(?: from (?P<path>\S+)| headline from (?P<headline>\S+)|: (?P<name>\w+)) -->\n)"
    r"(.*?)(?P<end><!-- end generated -->)",
    re.S,
)
# A report's headline: the first table under this heading (else the report's first table).
HEADLINE_SECTION = "## Variants × metrics"
_TABLE = re.compile(r"^\|.*\|\n\|[-| :]+\|\n(?:\|.*\|\n?)+", re.M)


def _demote(markdown: str, levels: int = 2) -> str:
    return re.sub(r"^(#+) ", lambda m: "#" * min(6, len(m[1]) + levels) + " ", markdown, flags=re.M)


def variants_list(root: Path = ROOT) -> str:
    """Each variant's first sentence (of its leading comment) and its stages in the order they run.
    Kept per process for one state of the configs (every file's bytes under `root/conf`, which lists the
    variants, and under CONF_DIR, which composes them): composing each variant costs ~0.4 s of CPU, and a
    check renders every document that holds the table."""
    folders = {root / "conf", CONF_DIR}
    conf = sorted(p for folder in folders for p in folder.rglob("*") if p.is_file())
    state = hashlib.sha256(b"".join(str(p).encode() + b"\0" + p.read_bytes() for p in conf)).hexdigest()
    if state not in _VARIANTS_LISTED:
        _VARIANTS_LISTED[state] = _variants_list(root)
    return _VARIANTS_LISTED[state]


_VARIANTS_LISTED: dict[str, str] = {}


def _variants_list(root: Path) -> str:
    rows = ["| variant | what it is | stages, in order |", "|---|---|---|"]
    for path in sorted((root / "conf" / "variant").glob("*.yaml")):
        stages = compose_config([f"variant={path.stem}"]).variant.stages
        order = " → ".join(f"`{s}`" for s in stages)
        rows.append(f"| `{path.stem}` | {first_sentence(leading_comment(path.read_text()))} | {order} |")
    return "\n".join(rows) + "\n"


def leading_comment(yaml_text: str) -> str:
    """The comment lines a YAML file starts with (its `# @package` line left out), as one line of text."""
    lines = []
    for line in yaml_text.splitlines():
        if not line.startswith("#"):
            break
        if "@package" not in line:
            lines.append(line.lstrip("# ").strip())
    return " ".join(lines)


def first_sentence(text: str) -> str:
    """Up to the first full stop followed by a space or the end (`0.5` and `k=60).` do not end one early)."""
    match = re.match(r"(.+?\.)(?=\s|$)", text)
    return match[1] if match else text


_RELATIVE_TARGET = re.compile(r"(!?\[[^\]]*\]\()([^)\s:#/][^)\s:]*)(\))")


def _retarget(markdown: str, source_dir: Path, doc_dir: Path) -> str:
    """Relative links and images of a copied report (`![](heatmap.png)`) made to work from the document."""
    return _RELATIVE_TARGET.sub(lambda m: m[1] + os.path.relpath(source_dir / m[2], doc_dir) + m[3], markdown)


def headline(source: Path, doc_dir: Path) -> str:
    """Links to one report and its headline table, as a results page shows it."""
    link = os.path.relpath(source, doc_dir)
    if not source.is_file():
        return f"*(missing: {link})*\n"
    text = source.read_text()
    section = text.split(HEADLINE_SECTION, 1)[1] if HEADLINE_SECTION in text else text
    table = _TABLE.search(section)
    # index.html is not linked: it is not committed (generated on demand; docs/gate_and_reports.md)
    lines = [f"[report]({link})"]
    if table:
        lines += ["", table[0].rstrip("\n")]
    return "\n".join(lines) + "\n"


def render(readme: str, root: Path = ROOT, levels: int = 2, doc_dir: Path | None = None) -> str:
    def fill(match: re.Match) -> str:
        if match["headline"]:
            body = headline(root / match["headline"], doc_dir or root)
        elif match["path"]:
            source = root / match["path"]
            text = source.read_text() if source.is_file() else f"*(missing: {match['path']})*\n"
            text = _retarget(text, source.parent, doc_dir or root)
            # The README's own heading names the block: the report's title line would repeat it.
            body = _demote(text.split("\n", 1)[1] if text.startswith("# ") else text, levels)
        else:
            body = {"variants": variants_list}[match["name"]](root)
        return match["open"] + body.rstrip("\n") + "\n" + match["end"]

    return BLOCK.sub(fill, readme)


def documents(root: Path = ROOT) -> dict[Path, int]:
    """Files with generated blocks, and how far their headings move down."""
    return {root / "README.md": 2, **{path: 1 for path in sorted((root / "docs").glob("*.md"))}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a document is not up to date")
    args = parser.parse_args(argv)
    stale = []
    for path, levels in documents().items():
        current = path.read_text()
        fresh = render(current, levels=levels, doc_dir=path.parent)
        if fresh == current:
            continue
        if args.check:
            stale.append(path)
        else:
            path.write_text(fresh)
            print(f"updated {path}")
    if stale:
        names = ", ".join(str(p.relative_to(ROOT)) for p in stale)
        print(f"out of date: {names}: run `python -m experiments.tools.readme_sync`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
