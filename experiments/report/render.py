"""One report, two renderings: Markdown (report.md) and a self-contained HTML page (index.html).

The report is a list of plain blocks (heading, paragraph, table, image, code); each renderer walks
the same list, so the two files never disagree. Inline text uses a tiny Markdown subset (`code`,
**bold**) that the HTML renderer translates; images are files beside report.md and base64 data
URIs inside index.html, so the HTML opens anywhere with nothing else.
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Table:
    frame: pd.DataFrame  # cells already formatted as strings; the index is the first column
    index_name: str = ""


@dataclass(frozen=True)
class Image:
    filename: str
    png: bytes
    alt: str


@dataclass(frozen=True)
class Code:
    text: str


Block = Heading | Paragraph | Table | Image | Code


def _md_cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def to_markdown(blocks: list[Block]) -> str:
    out: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            out.append(f"{'#' * block.level} {block.text}")
        elif isinstance(block, Paragraph):
            out.append(block.text)
        elif isinstance(block, Code):
            out.append(f"```\n{block.text}\n```")
        elif isinstance(block, Image):
            out.append(f"![{block.alt}]({block.filename})")
        elif isinstance(block, Table):
            frame = block.frame
            header = [block.index_name, *map(str, frame.columns)]
            lines = ["| " + " | ".join(map(_md_cell, header)) + " |", "|" + "---|" * len(header)]
            for index, row in frame.iterrows():
                lines.append("| " + " | ".join(_md_cell(v) for v in [index, *row.tolist()]) + " |")
            out.append("\n".join(lines))
    return "\n\n".join(out) + "\n"


_INLINE = [
    (re.compile(r"`([^`]+)`"), r"<code>\1</code>"),
    (re.compile(r"\*\*([^*]+)\*\*"), r"<b>\1</b>"),
    (re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)"), r'<a href="\2">\1</a>'),
]


def _inline(text: str) -> str:
    text = html.escape(str(text), quote=False)
    for pattern, replacement in _INLINE:
        text = pattern.sub(replacement, text)
    return text.replace("†", "<sup>†</sup>").replace("‡", "<sup>‡</sup>")


_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1200px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.45}
table{border-collapse:collapse;margin:1em 0;font-size:0.86em}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}
th:first-child,td:first-child{text-align:left}
th{background:#f3f3f3} tr:nth-child(even) td{background:#fafafa}
code,pre{background:#f5f5f5;border-radius:3px} pre{padding:0.8em;overflow-x:auto;white-space:pre-wrap}
img{max-width:100%;border:1px solid #eee;margin:0.5em 0}
""".strip()


def to_html(blocks: list[Block], title: str) -> str:
    body: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            body.append(f"<h{block.level}>{_inline(block.text)}</h{block.level}>")
        elif isinstance(block, Paragraph):
            body.append(f"<p>{_inline(block.text)}</p>")
        elif isinstance(block, Code):
            body.append(f"<pre><code>{html.escape(block.text)}</code></pre>")
        elif isinstance(block, Image):
            data = base64.b64encode(block.png).decode("ascii")
            body.append(f'<img src="data:image/png;base64,{data}" alt="{html.escape(block.alt)}">')
        elif isinstance(block, Table):
            head = "".join(f"<th>{_inline(c)}</th>" for c in [block.index_name, *block.frame.columns])
            rows = "".join(
                "<tr>" + "".join(f"<td>{_inline(v)}</td>" for v in [index, *row.tolist()]) + "</tr>"
                for index, row in block.frame.iterrows()
            )
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{_STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def write(blocks: list[Block], out_dir: Path, title: str) -> None:
    """report.md, index.html and every PNG into `out_dir` (PNGs no longer in the report are removed)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    images = {b.filename for b in blocks if isinstance(b, Image)}
    for stale in out_dir.glob("*.png"):
        if stale.name not in images:
            stale.unlink()
    for block in blocks:
        if isinstance(block, Image):
            (out_dir / block.filename).write_bytes(block.png)
    (out_dir / "report.md").write_text(to_markdown(blocks), encoding="utf-8")
    (out_dir / "index.html").write_text(to_html(blocks, title), encoding="utf-8")
