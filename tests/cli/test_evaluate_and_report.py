"""`simindex evaluate`, `simindex report` and `simindex tune --db`: the report is one
self-contained HTML page whose figures are real PNG (embedded) and SVG (beside it) files, that
opens with its verdict, and that a real browser (headless Chromium) renders whole."""

from __future__ import annotations

import base64
import html
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from simindex import Index
from simindex.cli import app
from simindex.errors import SimindexError
from simindex.report import (
    CAPTIONS,
    ExamplePair,
    captions,
    example_pairs,
    verdict,
    word_diff,
    write_report,
)
from tests.conftest import NEWS

runner = CliRunner()
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# A pair whose id and text try to inject markup: the page must show it as text.
HOSTILE = ExamplePair(
    "hostile", "<i>x</i>", "y&z", 0.5, "same <script>document.title='injected'</script> a", "same b"
)


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
        self.paragraphs: list[str] = []
        self.headings: list[str] = []
        self.tables = 0

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs))
        if tag == "figcaption":
            self.captions.append("")
        if tag == "table":
            self.tables += 1
        if tag == "p":
            self.paragraphs.append("")
        if tag in ("h2", "h3"):
            self.headings.append("")
        if tag not in self.VOID:
            self.open.append(tag)

    def handle_endtag(self, tag):
        assert self.open and self.open[-1] == tag, f"</{tag}> closes {self.open[-1:]}"
        self.open.pop()

    def handle_data(self, data):
        if "figcaption" in self.open:
            self.captions[-1] += data
        if "p" in self.open:
            self.paragraphs[-1] += data
        if self.open and self.open[-1] in ("h2", "h3"):
            self.headings[-1] += data


def parse(page_path: Path) -> _Page:
    page = _Page()
    page.feed(page_path.read_text(encoding="utf-8"))
    page.close()
    assert page.open == [], "unclosed tags"
    return page


@pytest.fixture(scope="module")
def rendered(tmp_path_factory, news):
    """The news corpus's report, with clusters and example pairs, drawn by the library, with
    the evaluation it shows and its examples."""
    folder = tmp_path_factory.mktemp("report")
    with Index.create(str(folder / "news.db")) as index:
        index.add(news)
        index.find_pairs()
        index.cluster()
        evaluation = index.evaluate(floor=0.3)
        stats = index.stats()
        examples = example_pairs(index, evaluation)
    files = write_report(evaluation, stats, folder / "report.html", [*examples, HOSTILE])
    return folder / "report.html", files, evaluation, examples


def test_report_is_one_self_contained_page_with_real_figures(rendered):
    page_path, files, evaluation, _ = rendered
    page = parse(page_path)
    assert page.tables == 5  # sample summary, bins, index, bandings, bucket sizes

    assert len(page.images) == len(CAPTIONS) == 5  # with clusters built
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


def test_report_opens_with_its_verdict_and_labels_sample_and_index(rendered, news):
    page_path, _, evaluation, examples = rendered
    page = parse(page_path)
    assert (
        page.paragraphs[0]
        == verdict(evaluation)
        == (
            "Recall at 0.8 on all 100 documents: 100% (18 of 18 pairs); the S-curve predicts 99.99%."
        )
    )
    assert page.paragraphs[1] == (
        "The whole index: 100 documents; 18 stored pairs (similarity >= 0.8, 20 x 5); "
        "18 clusters (>= 0.8)."
    )
    assert page.headings[0] == "From the sample: 100 of 100 documents (seed 0)"
    assert page.headings[-1] == "The whole index"

    # The stored pairs nearest the threshold, then the sample's most similar missed pair.
    assert [(e.id_a, e.id_b, round(e.similarity, 3)) for e in examples] == [
        ("n017", "n039", 0.804),
        ("n006", "n015", 0.904),
        ("n022", "n027", 0.908),
        ("n037", "n044", 0.561),  # under simindex-v2; v1 missed n014/n025 (0.572) instead
    ]
    assert examples[-1].kind.startswith("missed by the banding (sample; the S-curve gives")
    text = {external_id: body for external_id, body, _ in news}
    assert all((e.text_a, e.text_b) == (text[e.id_a], text[e.id_b]) for e in examples)
    titles = [h for h in page.headings if " and " in h]
    assert titles[-1] == "hostile: <i>x</i> and y&z, similarity 0.500"  # shown as text
    source = page_path.read_text(encoding="utf-8")
    assert "<script>" not in source and "&lt;script&gt;" in source


def test_verdict_names_the_sample_and_what_it_could_not_measure(tmp_path, news):
    with Index.create(str(tmp_path / "news.db")) as index:
        index.add(news)
        sampled = index.evaluate(sample=60, floor=0.3, seed=3)
        tiny = index.evaluate(sample=4, floor=0.3, seed=3)
    strong = sampled.pair_similarity >= 0.8
    found, total = int(sampled.pair_is_candidate[strong].sum()), int(strong.sum())
    assert total and verdict(sampled).startswith(
        f"Recall at 0.8 on a 60-document sample: {100 * found / total:.0f}% "
        f"({found} of {total} pairs); the S-curve predicts 99.9"
    )
    assert tiny.exact_pairs_at_threshold == 0
    assert verdict(tiny) == (
        "Recall at 0.8 on a 4-document sample: no pair reaches 0.8 (raise --sample)."
    )


def test_word_diff_marks_what_differs_escaped():
    shared = " ".join(f"w{i}" for i in range(30))
    left, right = word_diff(
        f"<b>Tom</b> & {shared} ran home", f"<b>Tom</b> & {shared} walked home now", context=3
    )
    assert left == (
        "&lt;b&gt;Tom&lt;/b&gt; &amp; w0 <span class=skip>[26 same words]</span> "
        "w27 w28 w29 <del>ran</del> home"
    )
    assert right.endswith("w29 <ins>walked</ins> home <ins>now</ins>")
    assert word_diff("a b", "a b") == ("a b", "a b")


@pytest.fixture(scope="session")
def chromium() -> str:
    """The chromium binary, or skip (fail when SIMINDEX_TEST_REQUIRE_CHROMIUM=1, as in CI)."""
    found = shutil.which("chromium")
    if found:
        return found
    reason = "chromium is not installed (apt-get install chromium): no browser to render the page"
    if os.environ.get("SIMINDEX_TEST_REQUIRE_CHROMIUM") == "1":
        pytest.fail(f"chromium is required here: {reason}")
    pytest.skip(reason)


# Run in the page after it loads: every image's decoded size, where the example texts sit,
# and the title (which the hostile example's script would change if it ran).
_PROBE = """<img id="control" src="data:image/png;base64,AAAA" alt="broken on purpose">
<script>
addEventListener("load", () => {
  const images = [...document.images].map(i => ({
    figure: i.closest("figure") ? i.closest("figure").id : i.id,
    width: i.naturalWidth, height: i.naturalHeight, shown: i.getBoundingClientRect().width}));
  const sides = [...document.querySelectorAll(".sides")].map(
    s => [...s.children].map(c => c.getBoundingClientRect().left));
  document.body.dataset.probe = JSON.stringify({images, sides, title: document.title});
});
</script>
</body>"""


def test_report_renders_in_a_headless_browser(chromium, rendered, tmp_path):
    page_path, _, _, examples = rendered
    browser = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               "--hide-scrollbars", "--force-device-scale-factor=1", "--window-size=1200,1800",
               f"--user-data-dir={tmp_path / 'profile'}"]  # fmt: skip

    probe = page_path.with_name("probe.html")  # beside the page: same relative links
    probe.write_text(page_path.read_text(encoding="utf-8").replace("</body>", _PROBE))
    dom = subprocess.run(
        [*browser, "--virtual-time-budget=10000", "--dump-dom", probe.as_uri()],
        check=True, capture_output=True, text=True, timeout=120,
    ).stdout  # fmt: skip
    found = json.loads(html.unescape(re.search(r'data-probe="([^"]*)"', dom).group(1)))
    images = {image["figure"]: image for image in found["images"]}
    assert images.pop("control")["width"] == 0  # a broken image does show up as 0 wide
    assert sorted(images) == sorted(CAPTIONS)
    for name, image in images.items():
        assert image["width"] >= 600 and image["height"] >= 300 and image["shown"] > 500, name
    assert len(found["sides"]) == len(examples) + 1  # and the hostile one
    assert all(right > left + 300 for left, right in found["sides"])  # side by side
    assert found["title"] == "simindex evaluation report"  # the hostile script did not run

    shot = tmp_path / "page.png"
    subprocess.run([*browser, f"--screenshot={shot}", page_path.as_uri()],
                   check=True, capture_output=True, timeout=120)  # fmt: skip
    from PIL import Image  # matplotlib's own dependency

    pixels = np.asarray(Image.open(shot).convert("RGB")).reshape(-1, 3).astype(int)
    assert len(pixels) == 1200 * 1800
    # The first screen shows the histogram as drawn: its blue (found) and red (missed) bars.
    for color in ((31, 119, 180), (214, 39, 40)):
        assert (np.abs(pixels - color).sum(axis=1) < 30).sum() > 200, color


def test_report_without_matplotlib_names_the_extra(rendered, monkeypatch, tmp_path):
    _, _, evaluation, _ = rendered
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    with pytest.raises(SimindexError, match=r"pip install 'simindex\[report\]'"):
        write_report(evaluation, {}, tmp_path / "r.html")
    db = tmp_path / "news.db"
    run("ingest", NEWS, "--db", db)
    result = run("report", "--db", db, "-o", tmp_path / "r.html", ok=False)
    assert result.exit_code == 1 and "pip install 'simindex[report]'" in result.stderr


def test_a_report_that_cannot_be_written_whole_leaves_nothing(rendered, monkeypatch, tmp_path):
    """A disk that fills while the figures are drawn: no page, no figures' folder, no
    hidden folder left beside them, an earlier report untouched, and the error names it."""
    import errno

    from matplotlib.figure import Figure

    page, _, evaluation, examples = rendered
    earlier = tmp_path / "report.html"
    shutil.copy(page, earlier)
    saved = Figure.savefig
    calls = []

    def fills_up(self, target, **options):
        calls.append(target)
        if len(calls) == 5:
            raise OSError(errno.ENOSPC, "No space left on device")
        return saved(self, target, **options)

    monkeypatch.setattr(Figure, "savefig", fills_up)
    with Index.open(str(page.parent / "news.db")) as index:
        stats = index.stats()
    with pytest.raises(SimindexError, match=r"report\.html: can't write the report \(No space"):
        write_report(evaluation, stats, earlier, examples)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]
    assert earlier.read_bytes() == page.read_bytes()


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
