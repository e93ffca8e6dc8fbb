"""One report, two renderings: Markdown (report.md) and an HTML page (index.html).

The report is a list of plain blocks (heading, paragraph, table, image, code); each renderer walks
the same list, so the two files never disagree. Inline text uses a tiny Markdown subset (`code`,
**bold**, backslash escapes) that the HTML renderer translates; images are PNG files beside report.md
and index.html, which both reference them (each figure is stored once; reports/ commits report.md and
the PNGs, index.html is generated on demand and git-ignored).

Text from data, configs and runs (suite names, labels, run names, sources) is never markup: the report
code passes it through `md()` (literal Markdown text) or `code()` (a code span) before it joins a
heading or paragraph; table headers, the index and the cells of a data table (`Table.markup` False)
are escaped here. The HTML renderer escapes everything, honours the backslash escapes, and makes a
link only of the report's own `[text](http...)` with a safe target, so a label such as
`[x](javascript:...)` or `x"onmouseover="...` stays visible text.
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
    markup: bool = False  # cells hold the report's own inline markup (**best**); else they are data
    # Columns of prose (memory texts): the last columns in Markdown; in HTML each such cell is a full-width
    # row under its row, since a column beside many score columns is squeezed to a few characters.
    text_columns: tuple[str, ...] = ()


@dataclass(frozen=True)
class Image:
    filename: str
    png: bytes
    alt: str


@dataclass(frozen=True)
class Code:
    text: str


Block = Heading | Paragraph | Table | Image | Code


_MD_ACTIVE = re.compile(r"([\\`*<>&])")
_LINK_CLOSE = re.compile(r"\](?=[(\[:])")


def md(value: object) -> str:
    """Data as literal Markdown text: nothing in it forms code, emphasis, a link, an autolink or HTML."""
    text = str(value).replace("\r", " ").replace("\n", " ").replace("\x00", "")
    return _LINK_CLOSE.sub(r"\\]", _MD_ACTIVE.sub(r"\\\1", text))


def code(value: object) -> str:
    """Data as a code span (`name`); as escaped text when a backtick or line break would end the span."""
    text = str(value)
    return md(text) if any(c in text for c in "`\n\r\x00") or not text else f"`{text}`"


def _md_cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _fence(text: str) -> str:
    runs = [len(m) for m in re.findall(r"`+", text)]
    return "`" * max(3, max(runs, default=0) + 1)


_SAFE_FILE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\.png")


def safe_filename(stem: str) -> str:
    """A file name for a figure from data (a label name): no path, no characters that need quoting."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", stem).lstrip(".") or "figure"


def to_markdown(blocks: list[Block]) -> str:
    out: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            out.append(f"{'#' * block.level} {block.text}")
        elif isinstance(block, Paragraph):
            out.append(block.text)
        elif isinstance(block, Code):
            fence = _fence(block.text)
            out.append(f"{fence}\n{block.text}\n{fence}")
        elif isinstance(block, Image):
            out.append(f"![{md(block.alt)}]({block.filename})")
        elif isinstance(block, Table):
            frame = block.frame
            header = [block.index_name, *map(str, frame.columns)]
            lines = ["| " + " | ".join(_md_cell(md(h)) for h in header) + " |", "|" + "---|" * len(header)]
            cell = _md_cell if block.markup else (lambda v: _md_cell(md(v)))
            for index, row in frame.iterrows():
                lines.append("| " + " | ".join([_md_cell(md(index)), *map(cell, row.tolist())]) + " |")
            out.append("\n".join(lines))
    return "\n\n".join(out) + "\n"


# Backslash escapes and code spans first (their content is literal), left to right as in CommonMark.
_LITERAL = re.compile(r"\\([!-/:-@\[-`{-~])|`([^`]+)`")
_BOLD = re.compile(r"\*\*([^*]+)\*\*")
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_SCHEME = re.compile(r"\s*([A-Za-z][A-Za-z0-9+.-]*):")
_SLOT = re.compile("\x00([0-9]+)\x00")


def _inline(text: object) -> str:
    """The inline Markdown subset as HTML; every character of the text is escaped for HTML."""
    kept: list[str] = []

    def keep(fragment: str) -> str:
        kept.append(fragment)
        return f"\x00{len(kept) - 1}\x00"

    def literal(match: re.Match) -> str:
        if match.group(1) is not None:
            return keep(html.escape(match.group(1)))
        return keep(f"<code>{html.escape(match.group(2))}</code>")

    def link(match: re.Match) -> str:
        href = html.unescape(_SLOT.sub("", match.group(2)))
        scheme = _SCHEME.match(href)
        if "\x00" in match.group(0) or (scheme and scheme.group(1).lower() not in ("http", "https")):
            return match.group(0)  # not a link the report makes (javascript:, data:...): it stays text
        return f'<a href="{html.escape(href)}">{match.group(1)}</a>'

    out = _LITERAL.sub(literal, str(text).replace("\x00", ""))
    out = html.escape(out, quote=True)
    out = _BOLD.sub(r"<b>\1</b>", out)
    out = _LINK.sub(link, out)
    out = out.replace("†", "<sup>†</sup>").replace("‡", "<sup>‡</sup>")
    return _SLOT.sub(lambda m: kept[int(m.group(1))], out)


_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1200px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.45}
table{border-collapse:collapse;margin:1em 0;font-size:0.86em}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}
th:first-child,td:first-child{text-align:left}
td.text{text-align:left;white-space:normal;overflow-wrap:anywhere;color:#333}
tr.text td{border-top:none;padding:1px 8px 6px 2.5em;background:#fff}
.scroll{overflow-x:auto;max-width:100%} .scroll table{margin:0.4em 0}
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
            alt = html.escape(block.alt, quote=True)
            body.append(f'<img src="{html.escape(block.filename, quote=True)}" alt="{alt}">')
        elif isinstance(block, Table):
            frame = block.frame
            columns = [c for c in frame.columns if c not in block.text_columns]
            prose = [c for c in frame.columns if c in block.text_columns]
            head = "".join(f"<th>{_inline(md(c))}</th>" for c in [block.index_name, *columns])
            cell = _inline if block.markup else (lambda v: _inline(md(v)))
            width = len(columns) + 1
            rows = "".join(
                "<tr>"
                + "".join(f"<td>{v}</td>" for v in [_inline(md(index)), *map(cell, row[columns].tolist())])
                + "</tr>"
                + "".join(
                    f'<tr class="text"><td class="text" colspan="{width}">{cell(row[c])}</td></tr>'
                    for c in prose
                    if str(row[c])
                )
                for index, row in frame.iterrows()
            )
            # A wide table scrolls inside its own box instead of widening the page.
            table = f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
            body.append(f'<div class="scroll">{table}</div>')
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{_STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def write(blocks: list[Block], out_dir: Path, title: str) -> None:
    """report.md, index.html and every PNG into `out_dir` (PNGs no longer in the report are removed)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    images = {b.filename for b in blocks if isinstance(b, Image)}
    unsafe = sorted(n for n in images if not _SAFE_FILE.fullmatch(n))
    if unsafe:  # a figure's file name from data must not reach outside out_dir (see safe_filename)
        raise ValueError(f"figure file names must be plain names: {unsafe}")
    for stale in out_dir.glob("*.png"):
        if stale.name not in images:
            stale.unlink()
    for block in blocks:
        if isinstance(block, Image):
            (out_dir / block.filename).write_bytes(block.png)
    (out_dir / "report.md").write_text(to_markdown(blocks), encoding="utf-8")
    (out_dir / "index.html").write_text(to_html(blocks, title), encoding="utf-8")


_IMG_SRC = re.compile(r'<img src="([^"]+)"')


def with_inline_images(page: str, folder: Path) -> str:
    """An index.html whose figures (PNG files beside it in `folder`) are inlined as data: URIs.

    For a viewer that shows the page alone, such as MLflow's artifact view: there a relative `src` is
    a broken image. What is written beside report.md keeps its relative `src` (each figure stored once)."""

    def inline(match: re.Match[str]) -> str:
        name = html.unescape(match.group(1))
        path = folder / name
        if not _SAFE_FILE.fullmatch(name) or not path.is_file():
            return match.group(0)
        return f'<img src="data:image/png;base64,{base64.b64encode(path.read_bytes()).decode("ascii")}"'

    return _IMG_SRC.sub(inline, page)
