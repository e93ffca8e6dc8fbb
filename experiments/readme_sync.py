"""Keep the README's result tables generated: copy report files into marked README blocks.

    <!-- generated from reports/beam/baselines-100K.md -->
    ...replaced by the file's content (its headings pushed two levels down)...
    <!-- end generated -->

`python -m experiments.readme_sync` rewrites the blocks; `--check` exits 1 when the README is out
of date (a test runs it), so a table in the README is always the one a command wrote.
A block `<!-- generated: variants -->` lists conf/variant/*.yaml with each file's first comment.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(
    r"(<!-- generated(?: from (?P<path>\S+)|: (?P<name>\w+)) -->\n)(.*?)(<!-- end generated -->)", re.S
)


def _demote(markdown: str, levels: int = 2) -> str:
    return re.sub(r"^(#+) ", lambda m: "#" * min(6, len(m[1]) + levels) + " ", markdown, flags=re.M)


def variants_list(root: Path = ROOT) -> str:
    rows = ["| variant | what it is |", "|---|---|"]
    for path in sorted((root / "experiments" / "conf" / "variant").glob("*.yaml")):
        comments = [
            ln.lstrip("# ").strip()
            for ln in path.read_text().splitlines()
            if ln.startswith("#") and "@package" not in ln
        ]
        rows.append(f"| `{path.stem}` | {comments[0] if comments else ''} |")
    return "\n".join(rows) + "\n"


def render(readme: str, root: Path = ROOT) -> str:
    def fill(match: re.Match) -> str:
        if match["path"]:
            source = root / match["path"]
            text = source.read_text() if source.is_file() else f"*(missing: {match['path']})*\n"
            # The README's own heading names the block: the report's title line would repeat it.
            body = _demote(text.split("\n", 1)[1] if text.startswith("# ") else text)
        else:
            body = {"variants": variants_list}[match["name"]](root)
        return match[1] + body.rstrip("\n") + "\n" + match[5]

    return BLOCK.sub(fill, readme)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if README.md is not up to date")
    args = parser.parse_args(argv)
    path = ROOT / "README.md"
    current = path.read_text()
    fresh = render(current)
    if args.check:
        if fresh != current:
            print("README.md is out of date: run `python -m experiments.readme_sync`", file=sys.stderr)
            return 1
        return 0
    path.write_text(fresh)
    print(f"updated {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
