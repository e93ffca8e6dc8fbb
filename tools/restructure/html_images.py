"""Committed reports: replace each base64 figure inside index.html by a reference to the same PNG beside
it (the renderer, experiments/report/render.py, now writes references; this rewrites the HTML already
committed without re-running any experiment). A data URI whose bytes match no sibling PNG is an error.

    python tools/restructure/html_images.py          # rewrite every reports/**/index.html
"""

from __future__ import annotations

import base64
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA_URI = re.compile(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


def rewrite(page: Path) -> int:
    by_bytes = {png.read_bytes(): png.name for png in page.parent.glob("*.png")}
    text = page.read_text(encoding="utf-8")
    missing: list[int] = []

    def to_file(m: re.Match) -> str:
        name = by_bytes.get(base64.b64decode(m.group(1)))
        if name is None:
            missing.append(m.start())
            return m.group(0)
        return f'<img src="{name}"'

    new = DATA_URI.sub(to_file, text)
    if missing:
        sys.exit(f"{page.relative_to(ROOT)}: {len(missing)} inlined figure(s) match no PNG beside it")
    if new != text:
        page.write_text(new, encoding="utf-8")
        return 1
    return 0


def main() -> None:
    pages = sorted((ROOT / "reports").rglob("index.html"))
    changed = sum(rewrite(page) for page in pages)
    print(f"html_images: {changed} of {len(pages)} index.html rewritten")


if __name__ == "__main__":
    main()
