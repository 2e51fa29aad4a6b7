"""The output shown in README.md and docs/*.md is what the program prints now.

A console block (or a Python block followed by a text block) marked with the comment
``<!-- output checked by tests/docs/test_doc_outputs.py -->`` is run in a scratch directory
holding the shipped examples/news.jsonl, and its output compared with the page's, line by line
(timings aside). Blocks marked ``... on Reuters-21578 -->`` run beside an index of
Reuters-21578 in ``reuters.db``; like the other numbers taken from Reuters, they are checked
only where ../shared/data holds the corpus.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import NEWS, REPO, REUTERS

MARK = "<!-- output checked by tests/docs/test_doc_outputs.py"
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# What changes from run to run: durations and rates, and the one-off compile after install.
_TIMING = [
    (re.compile(r"\d[\d,]*(\.\d+)? s\b"), "<t> s"),
    (re.compile(r"\d[\d,]*(\.\d+)? docs/s\b"), "<n> docs/s"),
]
_COMPILE = re.compile(r"^(Compiling simindex's numba kernels|Compiled in )")


@dataclass(frozen=True)
class Example:
    where: str
    language: str  # "console" or "python"
    code: str
    output: str  # a python block's expected stdout; a console block holds its own
    on_reuters: bool


def examples() -> list[Example]:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        pattern = re.escape(MARK) + r"( on Reuters-21578)? -->\n```(\w+)\n(.*?)```\n"
        for match in re.finditer(pattern, text, re.S):
            line = text[: match.start()].count("\n") + 1
            where = f"{page.relative_to(REPO)}:{line}"
            language, code = match[2], match[3]
            output = ""
            if language == "python":
                after = re.match(r"\n```text\n(.*?)```", text[match.end() :], re.S)
                assert after, f"{where}: a checked Python block needs a ```text block after it"
                output = after[1]
            found.append(Example(where, language, code, output, bool(match[1])))
    return found


def plain(output: str) -> list[str]:
    """The lines of an output without timings, blank lines or the compile notice."""
    lines = []
    for line in output.splitlines():
        if not line.strip() or _COMPILE.match(line):
            continue
        for pattern, replacement in _TIMING:
            line = pattern.sub(replacement, line)
        lines.append(line.rstrip())
    return lines


def console_steps(code: str) -> list[tuple[str, str]]:
    """(command, expected output) for each `$ command` of a console block."""
    steps: list[tuple[str, list[str]]] = []
    for line in code.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    return [(command, "\n".join(output)) for command, output in steps]


def _environment(scratch: Path) -> dict[str, str]:
    """A shell where `simindex` is this checkout's CLI, printing as on a 100-column pipe."""
    bin_dir = scratch / ".bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "simindex"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m simindex "$@"\n', encoding="utf-8")
    shim.chmod(0o755)
    environment = {
        key: value for key, value in os.environ.items() if key != "SIMINDEX_DATABASE_URL"
    }
    environment.update(
        PATH=f"{bin_dir}{os.pathsep}{environment.get('PATH', '')}",
        PYTHONPATH=f"{REPO}{os.pathsep}{environment.get('PYTHONPATH', '')}",
        COLUMNS="100",
        NO_COLOR="1",
    )
    return environment


def _scratch(tmp_path: Path) -> Path:
    (tmp_path / "examples").mkdir()
    shutil.copy(NEWS, tmp_path / "examples" / NEWS.name)
    return tmp_path


def run_example(example: Example, scratch: Path) -> None:
    environment = _environment(scratch)
    if example.language == "python":
        done = subprocess.run(
            [sys.executable, "-c", example.code],
            cwd=scratch, env=environment, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, f"{example.where}: {done.stderr}"
        assert plain(done.stdout) == plain(example.output), example.where
        return
    for command, expected in console_steps(example.code):
        if command.startswith("sqlite3 ") and shutil.which("sqlite3") is None:
            continue  # the page shows the sqlite3 shell; the SQL itself runs in test_sql_docs
        done = subprocess.run(
            ["bash", "-c", command], cwd=scratch, env=environment,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, f"{example.where}: `{command}` failed:\n{done.stdout}"
        assert plain(done.stdout) == plain(expected), f"{example.where}: `{command}`"


EXAMPLES = examples()
ON_NEWS = [e for e in EXAMPLES if not e.on_reuters]
ON_REUTERS = [e for e in EXAMPLES if e.on_reuters]


def test_the_pages_have_checked_examples():
    places = {e.where.split(":")[0] for e in EXAMPLES}
    assert {"README.md", "docs/getting-started.md", "docs/evaluation.md"} <= places


@pytest.mark.parametrize("example", ON_NEWS, ids=[e.where for e in ON_NEWS])
def test_a_documented_example_prints_what_the_page_shows(example, tmp_path):
    run_example(example, _scratch(tmp_path))


def test_plain_keeps_what_matters_and_drops_timings():
    shown = "Added 100 new documents in 0.4 s (230 docs/s)\n\n29 candidate pairs; 0.40 s\n"
    printed = (
        "Compiled in 31 s\nAdded 100 new documents in 1.2 s (83 docs/s)\n29 candidate pairs; 2.1 s"
    )
    assert plain(shown) == plain(printed)
    assert plain("Added 101 new documents") != plain("Added 100 new documents")


# Reuters-21578: the numbers of docs/tuning.md and docs/evaluation.md.


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def _simindex(scratch: Path, *arguments: str) -> str:
    done = subprocess.run(
        ["simindex", *arguments], cwd=scratch, env=_environment(scratch),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout
    return done.stdout


def _candidates_and_estimate(scratch: Path, banding: str) -> tuple[int, str]:
    """What `pairs` finds and what `tune --db` estimates, for the active banding."""
    pairs = _simindex(scratch, "pairs", "--full", "--db", "reuters.db", "--top", "0")
    tune = _simindex(scratch, "tune", "--threshold", "0.8", "--db", "reuters.db")
    estimate = re.search(rf"active {banding}: (~[\d,]+ \([\d,]+-[\d,]+\))", tune)
    assert estimate, tune
    return _number(re.search(r"([\d,]+) candidate pairs", pairs)[1]), estimate[1]


@pytest.fixture(scope="module")
def reuters_scratch(tmp_path_factory) -> Path:
    """A scratch directory with reuters.db, the default index of Reuters-21578 (skipped when
    the corpus is absent)."""
    if not REUTERS.exists():
        pytest.skip(f"{REUTERS} is not here (it is not shipped with simindex)")
    scratch = _scratch(tmp_path_factory.mktemp("reuters"))
    _simindex(scratch, "ingest", str(REUTERS), "--db", "reuters.db")
    return scratch


@pytest.mark.reuters
@pytest.mark.parametrize("example", ON_REUTERS, ids=[e.where for e in ON_REUTERS])
def test_a_documented_reuters_example_prints_what_the_page_shows(example, reuters_scratch):
    run_example(example, reuters_scratch)


def _rows(text: str, first_cell: str) -> list[list[str]]:
    """The cells of the Markdown table rows whose first cell matches ``first_cell``."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().split("|")[1:-1]]
        if cells and re.fullmatch(first_cell, cells[0]):
            rows.append(cells)
    return rows


@pytest.mark.reuters
def test_the_reuters_candidate_counts_of_tuning_and_evaluation_are_the_programs(
    reuters_scratch, tmp_path
):
    evaluation = (REPO / "docs" / "evaluation.md").read_text(encoding="utf-8")
    tuning = " ".join((REPO / "docs" / "tuning.md").read_text(encoding="utf-8").split())
    scratch = _scratch(tmp_path)  # a copy: the re-band below must not change reuters_scratch's
    shutil.copy(reuters_scratch / "reuters.db", scratch / "reuters.db")
    found = {}
    for bands, rows in ((20, 5), (42, 3)):
        if (bands, rows) != (20, 5):
            _simindex(scratch, "reband", "--db", "reuters.db", "--bands", str(bands),
                      "--rows", str(rows))  # fmt: skip
        banding = f"{bands} x {rows}"
        found[banding] = _candidates_and_estimate(scratch, banding)
    assert _rows(evaluation, r"\d+ x \d") == [
        [banding, estimate, f"{candidates:,}"] for banding, (candidates, estimate) in found.items()
    ]
    assert (
        f"20 x 5 yields {found['20 x 5'][0]:,} candidate pairs and 42 x 3 yields "
        f"{found['42 x 3'][0]:,}" in tuning
    )
