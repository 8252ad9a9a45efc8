"""Every repository path that the docs, the READMEs and the code's docstrings and comments name exists.

A results folder's README keeps a table of where each record used to be: a column headed "old path" is history,
not a reference, and is not checked.

A path is a token that starts at one of the repository's top folders (``sbdata/``, ``tests/``, ``examples/``,
``benchmarks/``, ``docs/``, ``.ci/``) and ends in a file name with a suffix, or in ``/`` for a folder. Paths with
a placeholder (``<suite>``, ``{name}``, ``*``, ``...``) name a family and are checked up to the placeholder. A path
at a commit, as git spells it (``35a2266:benchmarks/old/README.md``), names a retired file and is not checked.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOPS = ("sbdata", "tests", "examples", "benchmarks", "docs", ".ci")
PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(re.escape(top) for top in TOPS) + r")/[\w./<>{}*-]*)")
PLACEHOLDER = re.compile(r"[<{*]|\.\.\.")
AT_COMMIT = re.compile(r"\b[0-9a-f]{7,40}:$")  # ``<commit>:`` before a path: git's spelling of a file at a commit
SUFFIXES = (".py", ".md", ".json", ".jsonl", ".png", ".toml", ".txt", ".csv", ".cfg", ".yaml", ".yml", ".sh", ".tar")
# made when a command runs, not kept in the tree (see .gitignore)
MADE_AT_RUN_TIME = ("benchmarks/.cache/", "benchmarks/results/tmp/", "benchmarks/results/gpu/")  # gpu: no record yet


def _named_paths(text: str) -> list[str]:
    found = []
    for match in PATH.finditer(text):
        if AT_COMMIT.search(text, 0, match.start()):
            continue
        path = match.group(1).rstrip(".,:;)")
        cut = PLACEHOLDER.search(path)
        if cut:
            path = path[: cut.start()].rsplit("/", 1)[0] + "/"
        if path.endswith("/") or path.endswith(SUFFIXES):
            found.append(path)
    return found


def _sources() -> list[Path]:
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    texts += sorted((ROOT / "benchmarks").rglob("README.md"))
    texts += sorted(p for top in ("sbdata", "examples", "benchmarks") for p in (ROOT / top).rglob("*.py"))
    return [p for p in texts if p.exists()]


def _checked_text(line: str, history: int | None) -> str:
    """``line`` less the cell of a table's "old path" column (``history``: that column's index, or None)."""
    if history is None or not line.lstrip().startswith("|"):
        return line
    cells = line.split("|")
    return "|".join(cell for i, cell in enumerate(cells) if i != history + 1)


def test_every_path_the_docs_and_code_name_exists():
    missing = []
    for source in _sources():
        history = None
        for line_no, line in enumerate(source.read_text().splitlines(), 1):
            if line.lstrip().startswith("|") and "old path" in line:
                history = [cell.strip() for cell in line.strip().strip("|").split("|")].index("old path")
            elif not line.lstrip().startswith("|"):
                history = None
            for path in _named_paths(_checked_text(line, history)):
                if not (ROOT / path).exists() and not path.startswith(MADE_AT_RUN_TIME):
                    missing.append(f"{source.relative_to(ROOT)}:{line_no}: {path}")
    assert not missing, "paths named but not in the tree:\n" + "\n".join(missing)


def test_an_old_path_column_is_history():
    header = "| path | old path | made_at_commit |"
    row = "| `main/x.md` | `benchmarks/results/gone.md` | abc |"
    assert _named_paths(_checked_text(row, 1)) == [] and _named_paths(_checked_text(header, 1)) == []
    assert _named_paths(_checked_text("see `benchmarks/results/gone.md`", 1)) == ["benchmarks/results/gone.md"]


def test_the_path_finder_reads_what_it_should():
    text = "see sbdata/engine/_engine.py, `benchmarks/results/auto/<suite>/table.md` and docs/design.md."
    assert _named_paths(text) == ["sbdata/engine/_engine.py", "benchmarks/results/auto/", "docs/design.md"]
    assert _named_paths("import sbdata.engine; mysbdata/x.py; examples/common.load_mnist1d") == []
    assert _named_paths("`git show 35a2266:benchmarks/gone/README.md`, benchmarks/x.md") == ["benchmarks/x.md"]
