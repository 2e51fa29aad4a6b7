"""`simindex evaluate`, `simindex report` and `simindex tune --db`: the report is one
self-contained HTML page whose figures are real PNG (embedded) and SVG (beside it) files."""

from __future__ import annotations

import base64
import json
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simindex import Index
from simindex.cli import app
from simindex.errors import SimindexError
from simindex.report import CAPTIONS, captions, write_report
from tests.conftest import NEWS

runner = CliRunner()
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHROMIUM = Path("/usr/bin/chromium")


def run(*args: str, ok: bool = True):
    result = runner.invoke(app, [str(a) for a in args])
    if ok:
        assert result.exit_code == 0, (result.output, result.exception)
    return result


class _Page(HTMLParser):
    """Collects <img> sources and <figcaption> texts, and checks that tags nest properly."""

    VOID = {"img", "meta", "br", "link"}

    def __init__(self):
        super().__init__()
        self.open: list[str] = []
        self.images: list[dict] = []
        self.captions: list[str] = []
        self.tables = 0

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs))
        if tag == "figcaption":
            self.captions.append("")
        if tag == "table":
            self.tables += 1
        if tag not in self.VOID:
            self.open.append(tag)

    def handle_endtag(self, tag):
        assert self.open and self.open[-1] == tag, f"</{tag}> closes {self.open[-1:]}"
        self.open.pop()

    def handle_data(self, data):
        if "figcaption" in self.open:
            self.captions[-1] += data


@pytest.fixture(scope="module")
def rendered(tmp_path_factory, news):
    """The news corpus's report, drawn by the library, with the evaluation it shows."""
    folder = tmp_path_factory.mktemp("report")
    with Index.create(str(folder / "news.db")) as index:
        index.add(news)
        index.find_pairs()
        evaluation = index.evaluate(floor=0.3)
        stats = index.stats()
    files = write_report(evaluation, stats, folder / "report.html")
    return folder / "report.html", files, evaluation


def test_report_is_one_self_contained_page_with_real_figures(rendered):
    page_path, files, evaluation = rendered
    page = _Page()
    page.feed(page_path.read_text(encoding="utf-8"))
    page.close()
    assert page.open == [], "unclosed tags"
    assert page.tables >= 4  # evaluation summary, bins, index, bandings, bucket sizes

    assert len(page.images) == len(CAPTIONS) == 4
    for image in page.images:
        prefix, data = image["src"].split(",", 1)
        assert prefix == "data:image/png;base64"
        png = base64.b64decode(data, validate=True)
        assert png[:8] == PNG_SIGNATURE
        assert png[12:16] == b"IHDR"
        width, height = struct.unpack(">II", png[16:24])
        assert width >= 600 and height >= 300 and len(png) > 10_000, (width, height, len(png))
        assert image["alt"]

    folder = page_path.with_name("report_files")
    assert files[0] == page_path
    assert sorted(files[1:]) == sorted(
        folder / f"{name}.{ext}" for name in CAPTIONS for ext in ("png", "svg")
    )
    embedded = {base64.b64decode(i["src"].split(",", 1)[1]) for i in page.images}
    for name in CAPTIONS:
        assert (folder / f"{name}.png").read_bytes() in embedded
        root = ET.parse(folder / f"{name}.svg").getroot()
        assert root.tag == "{http://www.w3.org/2000/svg}svg"
        assert len(list(root.iter())) > 100  # axes, ticks, lines: not an empty canvas

    written = [" ".join(c.split()) for c in page.captions]
    for name, caption in captions(evaluation).items():
        assert any(c.startswith(caption) for c in written), name
    assert "sampled documents" in captions(evaluation)["similarity_histogram"]


def test_report_screenshot_in_a_headless_browser(rendered, tmp_path):
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is not installed: no browser to render the page in")
    page_path, _, _ = rendered
    shot = tmp_path / "page.png"
    subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu",
         f"--screenshot={shot}", "--window-size=1200,2400", page_path.as_uri()],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    assert shot.read_bytes()[:8] == PNG_SIGNATURE
    assert shot.stat().st_size > 10_000


def test_report_without_matplotlib_names_the_extra(rendered, monkeypatch, tmp_path):
    _, _, evaluation = rendered
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    with pytest.raises(SimindexError, match=r"pip install 'simindex\[report\]'"):
        write_report(evaluation, {}, tmp_path / "r.html")
    db = tmp_path / "news.db"
    run("ingest", NEWS, "--db", db)
    result = run("report", "--db", db, "-o", tmp_path / "r.html", ok=False)
    assert result.exit_code == 1 and "pip install 'simindex[report]'" in result.stderr


def test_evaluate_report_and_tune_on_the_command_line(tmp_path):
    db = tmp_path / "news.db"
    run("ingest", NEWS, "--db", db)

    table = run("evaluate", "--db", db, "--floor", "0.3")
    assert "0.95-1.00" in table.stdout and "candidate recall at 0.8: 1.0000" in table.stderr
    result = json.loads(run("evaluate", "--db", db, "--floor", "0.3", "--json").stdout)
    assert (result["sample"], result["exact_pairs"], result["candidate_pairs"]) == (100, 30, 29)
    assert result["verified_estimate"]["precision"] == pytest.approx(18 / 20)
    assert len(result["bins"]) == 14
    refused = run("evaluate", "--db", db, "--floor", "0.9", ok=False)
    assert refused.exit_code == 1 and "floor must be within" in refused.stderr

    run("report", "--db", db, "-o", tmp_path / "out" / "news.html", "--floor", "0.3")
    assert (tmp_path / "out" / "news.html").stat().st_size > 40_000
    assert (tmp_path / "out" / "news_files" / "s_curve.svg").exists()

    offline = run("tune", "--threshold", "0.8").stdout
    assert "candidate pairs on the index" not in offline and "chosen: 20 bands x 5 rows" in offline
    tuned = run("tune", "--threshold", "0.8", "--db", db, "--show", "3").stdout
    assert "chosen 20 x 5: 29 (exact)" in tuned and "active 20 x 5: 29 (exact)" in tuned
    mismatch = run("tune", "--threshold", "0.8", "--db", db, "--num-perm", "64", ok=False)
    assert "differs from the index's 128" in mismatch.stderr
