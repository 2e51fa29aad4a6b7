"""The documentation site: the generated CLI reference is current, the API reference covers
every public name, no page holds a run log, and the strict build passes."""

import importlib.util
import os
import re
import subprocess
import sys

import pytest

import simindex
from tests.conftest import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _cli_reference_module():
    path = REPO / "docs" / "make_cli_reference.py"
    spec = importlib.util.spec_from_file_location("make_cli_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cli_reference_is_what_the_commands_say():
    generated = _cli_reference_module().reference()
    assert (REPO / "docs" / "cli.md").read_text(encoding="utf-8") == generated, (
        "docs/cli.md is out of date: run python docs/make_cli_reference.py"
    )


def test_the_api_reference_documents_every_public_name():
    api = (REPO / "docs" / "api.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^::: simindex\.(\w+)$", api, re.M))
    assert set(simindex.__all__) <= documented, set(simindex.__all__) - documented


# A run log: a date, a time of day, a time zone, a commit hash, or a pointer to the
# benchmarks' history. Pages say what is true of the program, not when it was measured.
_RUN_LOG = [
    re.compile(r"\b20\d\d-\d\d-\d\d\b"),
    re.compile(r"\b[0-2]\d:[0-5]\d\b"),
    re.compile(r"\d UTC\b"),
    re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b"),
    re.compile(r"RESULTS\.md"),
]


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_a_page_holds_no_run_log(page):
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        for pattern in _RUN_LOG:
            found = pattern.search(line)
            assert not found, f"{page.name}:{number}: {found[0]!r} in {line.strip()!r}"


def test_the_readme_fits_in_about_two_hundred_lines():
    assert len((REPO / "README.md").read_text(encoding="utf-8").splitlines()) <= 210


def test_the_strict_site_build_passes(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs extra is not installed")
    pytest.importorskip("mkdocstrings", reason="the docs extra is not installed")
    path = f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    environment = {**os.environ, "PYTHONPATH": path, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, env=environment,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_the_first_compile_takes_as_long_in_the_readme_as_the_program_says():
    """The README names the first compile's duration once, as the compile notice does."""
    sources = "\n".join(p.read_text(encoding="utf-8") for p in (REPO / "simindex").rglob("*.py"))
    (notice,) = set(re.findall(r"numba kernels, once after install[^(]*\(about (\d+) s", sources))
    pages = {p.name: p.read_text(encoding="utf-8") for p in PAGES}
    said = {
        name: re.findall(r"compil[^.]*?about (\d+) s\b", " ".join(text.split()))
        for name, text in pages.items()
    }
    assert said.pop("README.md") == [notice]
    assert not any(said.values()), said
