"""The issue-26 restructuring as a re-appliable script: moves files with `git mv` and rewrites every
reference to them, from the one table in mapping.txt (old.module -> new.module).

Idempotent: a file already at its new place is skipped, a reference already rewritten is left alone, so
it can run again on a tree that gained new files and edits from other branches (the lead re-runs it
after merging them):

    .venv/bin/python tools/restructure/moves.py          # moves, rewrites, then prints what changed
    .venv/bin/python tools/restructure/moves.py --check  # exit 1 if anything is left to move or rewrite

Steps: (1) every tracked file under experiments/conf/ moves to conf/ (shipped as `experiments.conf` through
pyproject's package-dir); (2) each mapped module or package moves; (3) dotted module names
(`experiments.x.y`, `_target_: experiments.x`, `"experiments.x:main"`), `from experiments import x`,
file paths (`experiments/x.py`, `experiments/conf/`) and Hydra's `config_path` are rewritten in every
tracked .py/.yaml/.md/.toml/.cfg/.txt file, the Makefile and .ci/ (not in reports/ and datasets/: those
are records of past runs); (4) pyproject's explicit package list is regenerated from the folders that
hold an __init__.py.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
# A method that moved out of its class (to the harness): call-site text, new call text, the import it needs.
API_RENAMES = [
    (
        "Pipeline.from_config(",
        "pipeline_from_config(",
        "from experiments.run.build import pipeline_from_config",
    ),
]
TEXT_SUFFIXES = {".py", ".yaml", ".yml", ".md", ".toml", ".cfg", ".txt", ".ini"}
SKIP_PREFIXES = ("reports/", "datasets/", "tests/data/", "tools/restructure/", "requirements.lock")


def load_mapping() -> list[tuple[str, str]]:
    pairs = []
    for n, line in enumerate((HERE / "mapping.txt").read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        old, sep, new = (part.strip() for part in line.partition("->"))
        if not sep or not old or not new:
            sys.exit(f"{HERE / 'mapping.txt'}:{n}: expected 'old.module -> new.module', got {line!r}")
        pairs.append((old, new))
    return sorted(pairs, key=lambda p: -len(p[0]))


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout


def tracked() -> list[str]:
    return [p for p in git("ls-files", "-z").split("\0") if p]


def git_mv(old: Path, new: Path, dry: bool) -> bool:
    if not old.exists():
        return False
    if new.exists():
        sys.exit(f"moves: both {old.relative_to(ROOT)} and {new.relative_to(ROOT)} exist: merge them by hand")
    print(f"move {old.relative_to(ROOT)} -> {new.relative_to(ROOT)}")
    if not dry:
        new.parent.mkdir(parents=True, exist_ok=True)
        git("mv", str(old.relative_to(ROOT)), str(new.relative_to(ROOT)))
    return True


def ensure_package(folder: Path, dry: bool) -> None:
    """A new package folder gets an __init__.py (the committed ones carry a real docstring)."""
    for parent in [folder, *folder.parents]:
        if parent == ROOT / "experiments" or parent == ROOT:
            break
        init = parent / "__init__.py"
        if not init.exists() and not dry:
            parent.mkdir(parents=True, exist_ok=True)
            init.write_text(f'"""{parent.name}: see docs/architecture.md."""\n')
            git("add", str(init.relative_to(ROOT)))


def move_files(mapping: list[tuple[str, str]], dry: bool) -> int:
    moved = 0
    # (1) the configs: experiments/conf/** -> conf/**, file by file (a branch may have added some)
    for path in tracked():
        if path.startswith("experiments/conf/"):
            moved += git_mv(ROOT / path, ROOT / "conf" / path.removeprefix("experiments/conf/"), dry)
    # (2) modules and packages
    for old, new in mapping:
        if old == "experiments.conf":
            continue
        old_path, new_path = ROOT / old.replace(".", "/"), ROOT / new.replace(".", "/")
        if old_path.with_suffix(".py").is_file():
            ensure_package(new_path.parent, dry)
            moved += git_mv(old_path.with_suffix(".py"), new_path.with_suffix(".py"), dry)
        elif (old_path / "__init__.py").is_file() and not new.startswith(old + "."):
            ensure_package(new_path.parent, dry)
            for path in tracked():
                if path.startswith(f"{old_path.relative_to(ROOT)}/"):
                    rel = Path(path).relative_to(old_path.relative_to(ROOT))
                    moved += git_mv(ROOT / path, new_path / rel, dry)
    # a moved folder left behind with only __pycache__ in it would import as a namespace package and
    # shadow the moved one (experiments/conf/ hiding conf/ as experiments.conf): remove it
    for old in ["experiments.conf", *(old for old, _ in mapping)]:
        folder = ROOT / old.replace(".", "/")
        stale = all(p.suffix == ".pyc" for p in folder.rglob("*") if p.is_file())
        if folder.is_dir() and stale:
            if not (folder / "__init__.py").exists() and not dry:
                print(f"remove leftover {folder.relative_to(ROOT)}/")
                shutil.rmtree(folder)
    return moved


def _children(old: str, mapping: list[tuple[str, str]]) -> set[str]:
    """Names directly under `old` once it became a package: a continuation `old.<child>` is new code."""
    names = {new[len(old) + 1 :].split(".")[0] for _, new in mapping if new.startswith(old + ".")}
    folder = ROOT / old.replace(".", "/")
    if folder.is_dir():
        names |= {p.stem for p in folder.iterdir() if p.suffix == ".py" or (p / "__init__.py").is_file()}
    return names


def rewriter(mapping: list[tuple[str, str]]):
    table = {old: new for old, new in mapping if old != new}
    children = {old: _children(old, mapping) for old, new in table.items() if new.startswith(old + ".")}
    dotted = re.compile(r"(?<![\w.])(" + "|".join(re.escape(o) for o in table) + r")(?!\w)")

    def dotted_sub(m: re.Match) -> str:
        old, text, end = m.group(1), m.string, m.end()
        after = re.match(r"\.(\w+)", text[end:])
        if old in children and after and after.group(1) in children[old]:
            return old  # already the new name (old.<child>)
        imported = re.match(r"\s+import\s+\(?\s*(\w+)", text[end:])
        if old in children and imported and imported.group(1) in children[old]:
            return old  # `from old import <child>`: already the new layout
        if old in children and not after and not re.match(r":|\s+import\b", text[end:]):
            # an old module that is now a package, named bare (`python -m experiments.run`, prose, the
            # package list): still right. `old.attr`, `old:main` and `from old import x` are rewritten.
            return old
        return table[old]

    # `from pkg.mod import a, b as c` (one line or parenthesised): a name whose `pkg.mod.name` is in the
    # table (a moved module, or a moved symbol) is imported from its new home, the rest stay
    from_import = re.compile(
        r"^([ \t]*)from ((?:experiments|retrieval)(?:\.\w+)*) import "
        r"(\((?:[^)]*)\)|[\w ,]+?)([ \t]*#[^\n]*)?$",
        re.M,
    )

    def from_sub(m: re.Match) -> str:
        indent, module, names, comment = m.group(1), m.group(2), m.group(3), m.group(4) or ""
        parens = names.startswith("(")
        items = [n.strip() for n in names.strip("()").replace("\n", " ").split(",") if n.strip()]
        items = [re.sub(r"\s*#.*", "", n) for n in items]
        if not any(f"{module}.{n.split(' as ')[0].strip()}" in table for n in items):
            return m.group(0)
        groups: dict[str, list[str]] = {}
        for item in items:
            name, _, alias = (part.strip() for part in item.partition(" as "))
            full = f"{module}.{name}"
            if full in table:
                home, leaf = table[full].rsplit(".", 1)
            else:
                home, leaf = module, name
            alias = alias or (name if leaf != name else "")
            groups.setdefault(home, []).append(f"{leaf} as {alias}" if alias and alias != leaf else leaf)
        lines = []
        for home, leaves in groups.items():
            if parens and len(leaves) > 3:
                body = "".join(f"{indent}    {leaf},\n" for leaf in leaves)
                lines.append(f"{indent}from {home} import (\n{body}{indent})")
            else:
                lines.append(f"{indent}from {home} import {', '.join(leaves)}")
        lines[0] += comment
        return "\n".join(lines)

    # call sites of an API that moved (API_RENAMES): the new name, and its import when missing
    def rename_apis(text: str) -> str:
        for old_call, new_call, import_line in API_RENAMES:
            if old_call not in text:
                continue
            text = text.replace(old_call, new_call)
            if import_line not in text:
                first = re.search(r"^(from|import) (experiments|retrieval)\b", text, re.M)
                at = first.start() if first else 0
                text = text[:at] + import_line + "\n" + text[at:]
        return text

    paths: list[tuple[re.Pattern, str]] = [
        (re.compile(r"(?<![\w/.])experiments/conf(?![\w.])"), "conf"),
        (re.compile(r"\"experiments\" / \"conf\""), '"conf"'),
    ]
    for old, new in mapping:
        if old == "experiments.conf":
            continue
        old_p, new_p = old.replace(".", "/"), new.replace(".", "/")
        paths.append((re.compile(rf"(?<![\w/.]){re.escape(old_p)}\.py(?!\w)"), f"{new_p}.py"))
        if not new.startswith(old + "."):  # a package: its folder
            paths.append((re.compile(rf"(?<![\w/.]){re.escape(old_p)}/"), f"{new_p}/"))
    config_path = re.compile(r"config_path=\"(?:\.\./)?conf\"")

    def rewrite(path: str, text: str) -> str:
        if path.endswith(".py"):
            text = rename_apis(from_import.sub(from_sub, text))
        text = dotted.sub(dotted_sub, text)
        for pattern, new in paths:
            text = pattern.sub(new, text)
        if path.endswith(".py"):
            text = config_path.sub('config_path="pkg://experiments.conf"', text)
        return text

    return rewrite


def rewrite_references(mapping: list[tuple[str, str]], dry: bool) -> int:
    rewrite = rewriter(mapping)
    changed = 0
    rewritten: list[str] = []
    for path in tracked():
        text_file = Path(path).suffix in TEXT_SUFFIXES or Path(path).name in {"Makefile", ".gitignore"}
        readme = path.startswith("datasets/") and Path(path).name == "README.md"  # docs, not data
        if (path.startswith(SKIP_PREFIXES) and not readme) or not (text_file or path.startswith(".ci/")):
            continue
        file = ROOT / path
        if not file.is_file():
            continue
        text = file.read_text()
        new = rewrite(path, text)
        if new != text:
            changed += 1
            print(f"rewrite {path}")
            if not dry:
                file.write_text(new)
                rewritten.append(path)
    # a renamed import can fall out of isort order, a moved API can leave an import unused: ruff mends
    # both in the files rewritten here (long lines it only reports)
    ruff = ROOT / ".venv" / "bin" / "ruff"
    ruff = str(ruff) if ruff.is_file() else shutil.which("ruff")
    py = [p for p in rewritten if p.endswith(".py")]
    if py and ruff:
        subprocess.run([ruff, "check", "--fix", "--select", "I,F401", "--quiet", *py], cwd=ROOT, check=False)
    return changed


def bare_mentions(mapping: list[tuple[str, str]]) -> list[str]:
    """Python string literals that are exactly the name of an old module that is now a package: left as
    written (right for `-m`), but a branch's `import_module("experiments.run")` needs a look."""
    olds = [old for old, new in mapping if new.startswith(old + ".")]
    pattern = re.compile(r"(?<=[\"'])(" + "|".join(re.escape(o) for o in olds) + r")(?=[\"'])")
    found = []
    for path in tracked():
        if path.endswith(".py") and not path.startswith(SKIP_PREFIXES) and (ROOT / path).is_file():
            for n, line in enumerate((ROOT / path).read_text().splitlines(), 1):
                for m in pattern.finditer(line):
                    if not re.search(r"-m[\"']?,?\s*[\"']?$", line[: m.start()]) and " import " not in line:
                        found.append(f"{path}:{n}: {line.strip()}")
    return found


def package_list() -> list[str]:
    """Every package the wheel ships: folders with an __init__.py, and conf/ as experiments.conf."""
    found = []
    for top in ("retrieval", "experiments", "hydra_plugins"):
        for init in sorted((ROOT / top).rglob("__init__.py")):
            rel = init.parent.relative_to(ROOT)
            if "__pycache__" not in rel.parts:
                found.append(".".join(rel.parts))
    found.append("hydra_plugins")  # a namespace package (no __init__.py): Hydra scans it for plugins
    if (ROOT / "conf" / "__init__.py").is_file():
        found.append("experiments.conf")
    return sorted(set(found))


def update_packages(dry: bool) -> int:
    pyproject = ROOT / "pyproject.toml"
    text = pyproject.read_text()
    block = re.compile(r"(# packages: generated by tools/restructure/moves.py\npackages = \[)[^\]]*(\])")
    if not block.search(text):
        return 0
    body = "".join(f'\n    "{p}",' for p in package_list()) + "\n"
    new = block.sub(lambda m: m.group(1) + body + m.group(2), text)
    if new == text:
        return 0
    print("rewrite pyproject.toml packages")
    if not dry:
        pyproject.write_text(new)
    return 1


def main() -> None:
    dry = "--check" in sys.argv[1:]
    mapping = load_mapping()
    n = move_files(mapping, dry)
    n += rewrite_references(mapping, dry)
    n += update_packages(dry)
    print(f"moves: {n} change(s){' pending' if dry else ''}")
    for line in bare_mentions(mapping):
        print(f"review (bare name of a module that became a package): {line}")
    if dry and n:
        sys.exit(1)


if __name__ == "__main__":
    main()
