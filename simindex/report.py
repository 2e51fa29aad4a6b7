"""An HTML page a data lead reads in a minute: how good an index's results are, and why.

It opens with a one-line verdict (the recall measured at the threshold and the S-curve's
prediction), then keeps apart what comes from the evaluation's random sample and what from the
whole index. From the sample: the exact pairs by similarity, found and missed, and recall by
similarity bin. Example pairs side by side with their differing words marked: the stored pairs
of lowest similarity (the threshold's edge) and the most similar pairs the banding missed. From
the whole index: the S-curve, bucket sizes and, when clusters are built, cluster sizes.

Figures are drawn by matplotlib's Agg renderer, written as PNG and SVG into ``<name>_files/``
next to the page and embedded in it as PNG data URIs, so the one HTML file opens offline.
Needs the ``report`` extra (matplotlib). What each part means: docs/evaluation.md.
"""

from __future__ import annotations

import base64
import difflib
import html
import io
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from simindex.errors import InputError, SimindexError
from simindex.pipeline.banding import DEFAULT_RECALL, candidate_probability, similarity_at
from simindex.pipeline.candidates import DEFAULT_MAX_BUCKET_SIZE
from simindex.pipeline.evaluate import BIN_WIDTH, Evaluation
from simindex.spec import SignatureSpec
from simindex.store import display_url

if TYPE_CHECKING:
    from simindex.index import Index
    from simindex.results import IndexStats

# Figure name -> caption, in page order. The captions say what each picture shows; the page
# and the tests use the same text.
CAPTIONS = {
    "similarity_histogram": (
        "The {sample:,} sampled documents' pairs by exact Jaccard similarity, in bins of "
        "{width}: the pairs at or above {floor} (found by the exact all-pairs join) that the "
        "banding makes candidates (found) and those it does not (missed, counted in red: no "
        "query or pairs run can find them; below the threshold the S-curve expects some), and "
        "the candidates below {floor} that verification drops. The S-curve (right axis) is the share of pairs at each similarity "
        "expected to become candidates; the dotted line is the threshold {threshold}."
    ),
    "recall_by_similarity": (
        "Candidate rate by exact-similarity bin of width {width} (dots, with 95% Wilson "
        "intervals; the numbers are the bin's pairs), against the S-curve (line) and its mean "
        "over each bin's pairs (crosses). A dot well off its cross means the banding does not "
        "behave as the theory says."
    ),
    "s_curve": (
        "The S-curve of the active banding: the probability that a pair with Jaccard "
        "similarity s shares at least one band key and so becomes a candidate. The dotted "
        "lines mark the tuning target, P >= {recall} at the index threshold {threshold}; the "
        "dots mark where the curve crosses that probability and 0.5, and its value at half the "
        "threshold (where the tuner keeps false candidates few)."
    ),
    "bucket_sizes": (
        "How many buckets (documents sharing one band key) of each size the active banding "
        "has in the whole index, on log-log axes. A bucket of m documents makes m(m-1)/2 "
        "candidate pairs, so the tail sets the cost; buckets beyond the default "
        "--max-bucket-size ({max_bucket}, dashed when the buckets reach it) are linked to one "
        "member instead of paired out."
    ),
    "cluster_sizes": (
        "How many clusters (documents joined by stored pairs at or above the clusters' "
        "threshold) have each number of documents, in the whole index. Documents in no such "
        "pair are in no cluster."
    ),
}
_ALT = {
    "similarity_histogram": "Sampled pairs by exact similarity: found, missed, and candidates",
    "recall_by_similarity": "Candidate rate by similarity bin against the S-curve",
    "s_curve": "S-curve of the active banding",
    "bucket_sizes": "Bucket-size distribution, log-log",
    "cluster_sizes": "Cluster-size distribution",
}
_DPI = 110
_SIZE = (7.5, 4.4)
_CONTEXT_WORDS = 12  # shared words kept on each side of a difference in the example pairs


@dataclass(frozen=True)
class ExamplePair:
    """Two documents to judge by eye: why they are shown (``kind``), their similarity, and
    their stored texts (None when the index does not keep text)."""

    kind: str
    id_a: str
    id_b: str
    similarity: float
    text_a: str | None
    text_b: str | None


def example_pairs(index: Index, evaluation: Evaluation, count: int = 3) -> list[ExamplePair]:
    """Up to ``count`` stored pairs of lowest similarity in the whole index, and up to
    ``count`` of the most similar pairs of the sample that the banding missed."""
    chosen = [
        ("stored pair of lowest similarity (whole index)", p.id_a, p.id_b, p.similarity)
        for p in index.weakest_pairs(count)
    ]
    chosen += [
        (
            "missed by the banding (sample; the S-curve gives such a pair P = "
            f"{candidate_probability(similarity, evaluation.bands, evaluation.rows):.2f})",
            a,
            b,
            similarity,
        )
        for a, b, similarity in evaluation.missed_pairs(count)
    ]
    texts = index.texts({i for _, a, b, _ in chosen for i in (a, b)})
    return [
        ExamplePair(kind, a, b, float(similarity), texts.get(a), texts.get(b))
        for kind, a, b, similarity in chosen
    ]


def write_report(
    evaluation: Evaluation,
    stats: IndexStats,
    output: Path | str,
    examples: Sequence[ExamplePair] = (),
) -> list[Path]:
    """Write the HTML page at ``output`` and its figures (PNG and SVG) in ``<stem>_files/``,
    whole or not at all (drawn in a hidden folder beside them, then moved into place);
    returns the files written, the page first. ``stats`` is :meth:`Index.stats`; the
    cluster-size figure is drawn when it holds cluster sizes."""
    output = Path(output)
    files = output.with_name(f"{output.stem}_files")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{output.stem}.", dir=output.parent))
    except OSError as exc:
        raise InputError(f"{output}: can't write the report there: {exc.strerror}") from None
    try:
        names = _draw(evaluation, stats, output, staging, files.name, examples)
        if files.exists():
            shutil.rmtree(files)
        (staging / "figures").rename(files)
        os.replace(staging / "page.html", output)
    except OSError as exc:
        raise InputError(
            f"{output}: can't write the report ({exc.strerror}); neither it nor {files.name}/ "
            "was written"
        ) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return [output, *(files / name for name in names)]


def _draw(
    evaluation: Evaluation,
    stats: IndexStats,
    output: Path,
    staging: Path,
    folder: str,
    examples: Sequence[ExamplePair],
) -> list[str]:
    """The page (``staging``/page.html) and its figures (``staging``/figures/), as they will
    be named beside ``output`` (figures in ``folder``); the figures' file names."""
    new_figure = _figure_maker()
    figures = staging / "figures"
    figures.mkdir()
    drawings: dict[str, Callable[[Any, Evaluation, IndexStats], None]] = {
        "similarity_histogram": _draw_similarity_histogram,
        "recall_by_similarity": _draw_recall_by_similarity,
        "s_curve": _draw_s_curve,
        "bucket_sizes": _draw_bucket_sizes,
    }
    if stats.cluster_sizes:
        drawings["cluster_sizes"] = _draw_cluster_sizes
    written: list[str] = []
    embedded = {}
    for name, draw in drawings.items():
        figure = new_figure()
        draw(figure, evaluation, stats)
        png = io.BytesIO()
        figure.savefig(png, format="png", dpi=_DPI)
        (figures / f"{name}.png").write_bytes(png.getvalue())
        figure.savefig(figures / f"{name}.svg", format="svg", metadata={"Date": None})
        written += [f"{name}.png", f"{name}.svg"]
        embedded[name] = base64.b64encode(png.getvalue()).decode("ascii")
    page = _page(evaluation, stats, embedded, folder, examples)
    (staging / "page.html").write_text(page, encoding="utf-8")
    return written


def captions(evaluation: Evaluation) -> dict[str, str]:
    """The caption of each figure, filled in with this evaluation's numbers."""
    values = {
        "recall": DEFAULT_RECALL,
        "threshold": evaluation.threshold,
        "sample": evaluation.sampled,
        "floor": evaluation.floor,
        "width": BIN_WIDTH,
        "max_bucket": DEFAULT_MAX_BUCKET_SIZE,
    }
    return {name: text.format(**values) for name, text in CAPTIONS.items()}


def verdict(evaluation: Evaluation) -> str:
    """One line: the recall measured at the threshold, on how many documents, against the
    S-curve's prediction."""
    threshold = evaluation.threshold
    everything = evaluation.sampled == evaluation.documents
    where = (
        f"on all {evaluation.documents:,} documents"
        if everything
        else f"on a {evaluation.sampled:,}-document sample"
    )
    strong = evaluation.exact_pairs_at_threshold
    if not strong:
        fix = "the index holds none" if everything else "raise --sample"
        return f"Recall at {threshold:g} {where}: no pair reaches {threshold:g} ({fix})."
    found = round(evaluation.candidate_recall * strong)
    return (
        f"Recall at {threshold:g} {where}: {_percent(evaluation.candidate_recall)} "
        f"({found:,} of {strong:,} pairs); the S-curve predicts "
        f"{_percent(evaluation.predicted_recall)}."
    )


def word_diff(text_a: str, text_b: str, context: int = _CONTEXT_WORDS) -> tuple[str, str]:
    """HTML of two texts compared word by word: words only in the first are <del>, only in
    the second <ins>; shared runs longer than 2 * ``context`` words are cut to their ends.
    Every word is escaped."""
    words_a, words_b = text_a.split(), text_b.split()
    matcher = difflib.SequenceMatcher(None, words_a, words_b, autojunk=False)
    left: list[str] = []
    right: list[str] = []
    for tag, a_start, a_end, b_start, b_end in matcher.get_opcodes():
        if tag == "equal":
            shared = _shorten(words_a[a_start:a_end], context)
            left.append(shared)
            right.append(shared)
            continue
        if a_end > a_start:
            left.append(f"<del>{_escape_words(words_a[a_start:a_end])}</del>")
        if b_end > b_start:
            right.append(f"<ins>{_escape_words(words_b[b_start:b_end])}</ins>")
    return " ".join(left), " ".join(right)


def _shorten(words: list[str], context: int) -> str:
    if len(words) <= 2 * context:
        return _escape_words(words)
    skipped = len(words) - 2 * context
    return (
        f"{_escape_words(words[:context])} <span class=skip>[{skipped:,} same words]</span> "
        f"{_escape_words(words[-context:])}"
    )


def _escape_words(words: list[str]) -> str:
    return html.escape(" ".join(words))


def require_matplotlib() -> None:
    """Raise SimindexError, naming the extra to install, when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SimindexError(
            "the report needs matplotlib, which is not installed: pip install 'simindex[report]'"
        ) from None


def _figure_maker() -> Callable[[], Any]:
    """A maker of matplotlib figures on the Agg canvas. matplotlib is imported only here,
    when a report is drawn, and without pyplot: no global state, no GUI backend."""
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    def new_figure() -> Figure:
        figure = Figure(figsize=_SIZE, layout="constrained")
        FigureCanvasAgg(figure)
        return figure

    return new_figure


def _curve(evaluation: Evaluation, start: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    s = np.linspace(start, 1, 401)
    return s, candidate_probability(s, evaluation.bands, evaluation.rows)


def _draw_s_curve(figure: Any, evaluation: Evaluation, _stats: IndexStats) -> None:
    bands, rows, threshold = evaluation.bands, evaluation.rows, evaluation.threshold
    ax = figure.add_subplot()
    s, p = _curve(evaluation)
    ax.plot(s, p, color="C0", label=f"P(s) = 1 - (1 - s^{rows})^{bands}")
    ax.axvline(threshold, color="gray", linestyle=":", linewidth=1)
    ax.axhline(DEFAULT_RECALL, color="gray", linestyle=":", linewidth=1)
    crossing = similarity_at(DEFAULT_RECALL, bands, rows)
    half = similarity_at(0.5, bands, rows)
    points = [
        (threshold, "o", f"threshold: P({threshold:g}) = {_p(threshold, bands, rows):.5f}"),
        (crossing, "s", f"P = {DEFAULT_RECALL} at s = {crossing:.3f}"),
        (half, "D", f"P = 0.5 at s = {half:.3f}"),
        (
            threshold / 2,
            "^",
            f"half the threshold: P({threshold / 2:g}) = {_p(threshold / 2, bands, rows):.3f}",
        ),
    ]
    for x, marker, label in points:
        ax.plot([x], [_p(x, bands, rows)], marker, markersize=6, label=label)
    ax.set(
        xlim=(0, 1),
        ylim=(0, 1.03),
        xlabel="Jaccard similarity s",
        ylabel="P(candidate)",
        title=f"S-curve of {bands} bands x {rows} rows",
    )
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(alpha=0.3)


def _p(s: float, bands: int, rows: int) -> float:
    return float(candidate_probability(s, bands, rows))


def _draw_similarity_histogram(figure: Any, evaluation: Evaluation, _stats: IndexStats) -> None:
    """Stacked bars on a linear scale, so that a bin's height is its pairs; the missed pairs
    are on top in red with their count written above, visible however few they are."""
    ax = figure.add_subplot()
    edges = np.linspace(0, 1, round(1 / BIN_WIDTH) + 1)
    similarity, is_candidate = evaluation.pair_similarity, evaluation.pair_is_candidate
    dropped = evaluation.candidate_similarity[evaluation.candidate_similarity < evaluation.floor]
    series = [
        (similarity[is_candidate], "found: candidates", "C0"),
        (similarity[~is_candidate], "missed: not candidates", "C3"),
        (dropped, f"candidates below {evaluation.floor:g}", "0.78"),
    ]
    bottom = np.zeros(edges.size - 1)
    for values, label, color in series:
        counts = np.histogram(np.clip(values, 0, 1), edges)[0]
        ax.bar(edges[:-1], counts, BIN_WIDTH, bottom=bottom, align="edge", color=color,
               edgecolor="white", linewidth=0.5, label=f"{label}: {values.size:,}")  # fmt: skip
        if color == "C3":
            for left, top, missed in zip(edges[:-1], bottom + counts, counts, strict=True):
                if missed:
                    ax.annotate(f"{missed:,}", (left + BIN_WIDTH / 2, top), xytext=(0, 2),
                                textcoords="offset points", ha="center", va="bottom",
                                fontsize=8, color="C3", fontweight="bold")  # fmt: skip
        bottom += counts
    ax.axvline(evaluation.threshold, color="gray", linestyle=":", linewidth=1,
               label=f"threshold {evaluation.threshold:g}")  # fmt: skip
    ax.set(
        xlim=(0, 1),
        ylim=(0, max(bottom.max(), 1) * 1.25),  # room for the counts and the legend
        xlabel="exact Jaccard similarity",
        ylabel="pairs of the sample",
        title=f"Pairs of {evaluation.sampled:,} sampled documents (of {evaluation.documents:,})",
    )
    curve_ax = ax.twinx()
    s, p = _curve(evaluation)
    curve_ax.plot(s, p, color="black", linestyle="--", linewidth=1, label="S-curve P(s)")
    curve_ax.set(ylim=(0, 1.03), ylabel="P(candidate)")
    lines, labels = ax.get_legend_handles_labels()
    more_lines, more_labels = curve_ax.get_legend_handles_labels()
    ax.legend(lines + more_lines, labels + more_labels, loc="upper left", fontsize=8)


def _draw_bucket_sizes(figure: Any, _evaluation: Evaluation, stats: IndexStats) -> None:
    """The x axis ends just past the largest bucket; the cut-off is drawn only when the
    buckets reach it, and named in the legend either way."""
    ax = figure.add_subplot()
    sizes = np.array([s for s, _ in stats.bucket_sizes], dtype=np.float64)
    counts = np.array([c for _, c in stats.bucket_sizes], dtype=np.float64)
    largest = float(sizes.max()) if sizes.size else 1.0
    if sizes.size:
        ax.plot(sizes, counts, "o-", color="C0", markersize=4, linewidth=1,
                label=f"buckets (largest: {largest:,.0f} documents)")  # fmt: skip
    if largest >= DEFAULT_MAX_BUCKET_SIZE:
        ax.axvline(DEFAULT_MAX_BUCKET_SIZE, color="C3", linestyle="--", linewidth=1,
                   label=f"default --max-bucket-size ({DEFAULT_MAX_BUCKET_SIZE})")  # fmt: skip
    else:
        ax.plot([], [], " ", label=f"no bucket near --max-bucket-size ({DEFAULT_MAX_BUCKET_SIZE})")
    ax.legend(loc="upper right", fontsize=8)
    pairs = int((counts * sizes * (sizes - 1) / 2).sum())
    active = _active(stats)
    ax.set(
        xscale="log",
        yscale="log",
        xlim=(0.8, max(largest, 2) * 1.4),
        xlabel="bucket size (documents sharing a band key)",
        ylabel="buckets",
        title=f"Buckets of {active['bands']} x {active['rows']}: "
        f"{int(counts.sum()):,} buckets, {pairs:,} pairs inside them (with repeats)",
    )
    _plain_log_axis(ax.xaxis, 1, largest)
    if counts.size:
        _plain_log_axis(ax.yaxis, counts.min(), counts.max())
    ax.grid(alpha=0.3)
    ax.grid(alpha=0.1, which="minor")


def _draw_cluster_sizes(figure: Any, _evaluation: Evaluation, stats: IndexStats) -> None:
    """Bars per size while there are few sizes (each labelled with its count), else points
    on log-log axes; the count axis is logarithmic when counts span more than 50x."""
    ax = figure.add_subplot()
    sizes = np.array([s for s, _ in stats.cluster_sizes])
    counts = np.array([c for _, c in stats.cluster_sizes])
    if sizes.max() <= 40:
        bars = ax.bar(sizes, counts, 0.8, color="C2")
        ax.bar_label(bars, [f"{c:,}" for c in counts], fontsize=8)
        ax.set_xlim(1.4, max(int(sizes.max()), 10) + 0.6)  # narrow bars even for few sizes
        ax.xaxis.set_major_locator(_integer_locator())
    else:
        ax.plot(sizes, counts, "o", color="C2", markersize=4)
        ax.set_xscale("log")
        _plain_log_axis(ax.xaxis, sizes.min(), sizes.max())
    if counts.max() > 50 * counts.min():
        ax.set_yscale("log")
        ax.set_ylim(0.7, counts.max() * 2.5)  # room for the labels
        _plain_log_axis(ax.yaxis, counts.min(), counts.max())
    else:
        ax.set_ylim(0, counts.max() * 1.15)
        ax.yaxis.set_major_locator(_integer_locator())
    active = _active(stats)
    ax.set(
        xlabel="documents in the cluster",
        ylabel="clusters",
        title=f"{int(counts.sum()):,} clusters of {int((sizes * counts).sum()):,} documents "
        f"(pairs >= {active['clusters_threshold']:g}, largest {int(sizes.max()):,})",
    )
    ax.grid(alpha=0.3, axis="y")


def _plain_log_axis(axis: Any, low: float, high: float) -> None:
    """Label a log axis with plain numbers (1, 20, 1,000), not powers of ten; the ticks
    between powers of ten get labels too when the data span less than 1.5 of them."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    plain = FuncFormatter(lambda value, _: f"{value:,.0f}" if value >= 1 else f"{value:g}")
    axis.set_major_formatter(plain)
    axis.set_minor_formatter(plain if high < 30 * max(low, 1) else NullFormatter())


def _integer_locator() -> Any:
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(integer=True)


def _draw_recall_by_similarity(figure: Any, evaluation: Evaluation, _stats: IndexStats) -> None:
    ax = figure.add_subplot()
    s, p = _curve(evaluation, evaluation.floor)
    ax.plot(s, p, color="C3", linewidth=1.2, label="S-curve P(s)")
    filled = [b for b in evaluation.bins if b.pairs]
    if filled:
        centers = np.array([(b.low + b.high) / 2 for b in filled])
        rates = np.array([b.rate for b in filled])
        low = np.array([b.interval[0] for b in filled])
        high = np.array([b.interval[1] for b in filled])
        ax.errorbar(
            centers,
            rates,
            yerr=[rates - low, high - rates],
            fmt="o",
            color="C0",
            capsize=3,
            label="candidate rate (95% interval)",
        )
        ax.plot(
            centers,
            [b.predicted for b in filled],
            "x",
            color="C3",
            markersize=7,
            label="predicted mean P(s) of the bin",
        )
        for b, x in zip(filled, centers, strict=True):
            ax.annotate(f"{b.pairs:,}", (x, 0.02), ha="center", fontsize=7, color="0.35")
    ax.axvline(evaluation.threshold, color="gray", linestyle=":", linewidth=1)
    ax.set(
        xlim=(evaluation.floor, 1),
        ylim=(0, 1.05),
        xlabel="exact Jaccard similarity",
        ylabel="share of pairs that are candidates",
        title=f"Recall by similarity, {evaluation.bands} x {evaluation.rows}",
    )
    ax.legend(loc="lower right", bbox_to_anchor=(1, 0.07), fontsize=8)
    ax.grid(alpha=0.3)


# -- the page ------------------------------------------------------------------------------

_STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; max-width: 64rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
.verdict { font-size: 1.3rem; font-weight: 600; margin: 0.5rem 0; }
.whole { font-size: 1.05rem; margin: 0 0 0.5rem; }
.meta { color: #666; font-size: 0.85rem; }
table { border-collapse: collapse; margin: 0.5rem 0 1.5rem; }
th, td { border: 1px solid #ccc; padding: 0.2rem 0.6rem; text-align: right; }
th:first-child, td:first-child { text-align: left; }
figure { margin: 1rem 0 2rem; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: 0.9rem; color: #444; }
.example { margin: 1rem 0 1.5rem; }
.example h3 { font-size: 1rem; margin: 0 0 0.3rem; }
.sides { display: grid; grid-template-columns: 1fr 1fr; gap: 1rem; }
.sides > div { border: 1px solid #ddd; padding: 0.4rem 0.6rem; font-size: 0.85rem; overflow-wrap: anywhere; }
.sides b { display: block; margin-bottom: 0.2rem; }
del { background: #ffd2cf; text-decoration: none; }
ins { background: #c9f2cf; text-decoration: none; }
.skip { color: #888; font-style: italic; }
"""


def _page(
    evaluation: Evaluation,
    stats: IndexStats,
    embedded: dict[str, str],
    folder: str,
    examples: Sequence[ExamplePair],
) -> str:
    texts = captions(evaluation)
    figures = {
        name: f'<figure id="{name}"><img src="data:image/png;base64,{embedded[name]}" '
        f'alt="{html.escape(_ALT[name])}"><figcaption>{html.escape(texts[name])} '
        f'(<a href="{folder}/{name}.svg">SVG</a>, <a href="{folder}/{name}.png">PNG</a>)'
        "</figcaption></figure>"
        for name in embedded
    }
    scheme = SignatureSpec.from_dict(stats.spec).describe()
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    sampled = f"{evaluation.sampled:,} of {evaluation.documents:,} documents"
    return f"""<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>simindex evaluation report</title><style>{_STYLE}</style></head>
<body>
<h1>simindex evaluation report</h1>
<p class="verdict">{html.escape(verdict(evaluation))}</p>
<p class="whole">{html.escape(_whole_index_line(stats))}</p>
<p class="meta">{html.escape(display_url(stats.url))}<br>{html.escape(scheme)}; text {"kept" if stats.keep_text else "not kept"}<br>generated {generated}</p>
<h2>From the sample: {sampled} (seed {evaluation.seed})</h2>
<p>Every pair of the sampled documents, compared by exact Jaccard similarity: the truth the
banding is measured against. Counts here are of the sample's pairs, not the index's.</p>
{_table(["measure (sample)", "value"], _sample_rows(evaluation))}
{figures["similarity_histogram"]}
{figures["recall_by_similarity"]}
{_table(["exact similarity", "pairs", "candidates", "candidate rate", "predicted", "95% interval"], _bin_rows(evaluation))}
<h2>Example pairs</h2>
<p>Words only in the left text are <del>red</del>, words only in the right one
<ins>green</ins>.</p>
{"".join(_example(e) for e in examples) or "<p>No example pairs: no stored pairs and no missed pairs.</p>"}
<h2>The whole index</h2>
{_table(["measure (whole index)", "value"], _index_rows(stats))}
{figures.get("cluster_sizes", _no_clusters(stats))}
{figures["bucket_sizes"]}
{figures["s_curve"]}
{_table(["banding", "bands x rows", "state", "active", "pairs found at", "clusters at"], _banding_rows(stats))}
{_table(["bucket size", "buckets"], [(f"{s:,}", f"{c:,}") for s, c in stats.bucket_sizes])}
</body>
</html>
"""


def _active(stats: IndexStats) -> dict[str, Any]:
    return next(b for b in stats.bandings if b["id"] == stats.active_banding)


def _whole_index_line(stats: IndexStats) -> str:
    active = _active(stats)
    line = f"The whole index: {stats.documents:,} documents; "
    if active["pairs_threshold"] is None:
        line += "pairs not found yet (run `simindex pairs`)"
    else:
        line += (
            f"{stats.pairs:,} stored pairs (similarity >= {active['pairs_threshold']:g}, "
            f"{active['bands']} x {active['rows']})"
        )
    if stats.cluster_sizes is not None:
        clusters = sum(c for _, c in stats.cluster_sizes)
        line += f"; {clusters:,} clusters (>= {active['clusters_threshold']:g})"
    return line + "."


def _sample_rows(evaluation: Evaluation) -> list[tuple[str, str]]:
    result = evaluation.to_dict()
    exact, estimate = result["verified_exact"], result["verified_estimate"]
    error = result["estimate_error"]
    return [
        ("documents sampled (seed)", f"{evaluation.sampled:,} ({evaluation.seed})"),
        ("banding, threshold", f"{evaluation.bands} x {evaluation.rows}, {evaluation.threshold:g}"),
        ("candidate pairs", f"{result['candidate_pairs']:,}"),
        (f"exact pairs >= {evaluation.floor:g}", f"{result['exact_pairs']:,}"),
        (f"exact pairs >= {evaluation.threshold:g}", f"{result['exact_pairs_at_threshold']:,}"),
        (
            "candidate recall (S-curve predicts)",
            f"{_number(result['candidate_recall'])} ({_number(result['predicted_recall'])})",
        ),
        (
            "verified by exact Jaccard: recall, precision",
            f"{_number(exact['recall'])}, {_number(exact['precision'])} ({exact['pairs']:,} pairs)",
        ),
        (
            "verified by the estimate: recall, precision",
            f"{_number(estimate['recall'])}, {_number(estimate['precision'])} ({estimate['pairs']:,} pairs)",
        ),
        (
            f"estimate - exact over {error['pairs']:,} pairs: mean, std (theory)",
            f"{_number(error['mean'], '+.4f')}, {_number(error['std'])} ({_number(error['theoretical_std'])})",
        ),
    ]


def _bin_rows(evaluation: Evaluation) -> list[list[str]]:
    return [
        [
            f"{b.low:.2f}-{b.high:.2f}",
            f"{b.pairs:,}",
            f"{b.candidates:,}",
            _number(b.rate),
            _number(b.predicted),
            _interval(b.interval),
        ]
        for b in evaluation.bins
    ]


def _index_rows(stats: IndexStats) -> list[tuple[str, str]]:
    rows = [
        ("documents", f"{stats.documents:,}"),
        ("groups of exact duplicates", f"{stats.exact_duplicate_groups:,}"),
        ("stored pairs (active banding)", f"{stats.pairs:,}"),
    ]
    if stats.cluster_sizes is not None:
        sizes = stats.cluster_sizes
        clustered = sum(size * count for size, count in sizes)
        rows.append(
            ("clusters (documents in them)", f"{sum(c for _, c in sizes):,} ({clustered:,})")
        )
    return rows


def _banding_rows(stats: IndexStats) -> list[list[str]]:
    return [
        [
            str(b["id"]),
            f"{b['bands']} x {b['rows']}",
            b["state"],
            "yes" if b["is_active"] else "",
            _threshold(b["pairs_threshold"]),
            _threshold(b["clusters_threshold"]),
        ]
        for b in stats.bandings
    ]


def _no_clusters(stats: IndexStats) -> str:
    if stats.cluster_sizes is None:
        return "<p>Clusters have not been built: <code>simindex clusters</code> builds them.</p>"
    return "<p>Clusters are built, but no stored pair reaches their threshold.</p>"


def _example(example: ExamplePair) -> str:
    title = (
        f"{example.kind}: {example.id_a} and {example.id_b}, similarity {example.similarity:.3f}"
    )
    if example.text_a is None or example.text_b is None:
        left = right = '<span class="skip">text not kept</span>'
    elif example.text_a.split() == example.text_b.split():
        left = right = '<span class="skip">the same words (they differ only in spacing)</span>'
    else:
        left, right = word_diff(example.text_a, example.text_b)
    return (
        f'<div class="example"><h3>{html.escape(title)}</h3><div class="sides">'
        f"<div><b>{html.escape(example.id_a)}</b>{left}</div>"
        f"<div><b>{html.escape(example.id_b)}</b>{right}</div></div></div>"
    )


def _table(header: list[str], rows: list) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(cell))}</td>" for cell in row) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _percent(value: float) -> str:
    """100% only when nothing is missed; otherwise two decimals, never rounded up to 100."""
    return "100%" if value == 1 else f"{min(100 * value, 99.99):.2f}%"


def _threshold(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _number(value: float | None, spec: str = ".4f") -> str:
    return "-" if value is None else format(value, spec)


def _interval(interval: tuple[float, float] | None) -> str:
    return "-" if interval is None else f"{interval[0]:.3f}-{interval[1]:.3f}"
