"""An HTML page of pictures and numbers that shows how good an index's results are.

Four figures, drawn by matplotlib's Agg renderer: the active banding's S-curve with its
tuning targets, candidate and verified pairs by exact similarity under that curve, the
bucket-size distribution, and recall by similarity against the curve's prediction. Each is
written as PNG and SVG into ``<name>_files/`` next to the page and embedded in the page as
a PNG data URI, so the one HTML file opens offline. Needs the ``report`` extra (matplotlib).
What each figure means: docs/evaluation.md.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from simindex.banding import DEFAULT_RECALL, candidate_probability, similarity_at
from simindex.candidates import DEFAULT_MAX_BUCKET_SIZE
from simindex.errors import InputError, SimindexError
from simindex.evaluate import BIN_WIDTH, Evaluation
from simindex.spec import SignatureSpec

# Figure name -> caption. The captions say what each picture shows; the page and the tests
# use the same text.
CAPTIONS = {
    "s_curve": (
        "The S-curve of the active banding: the probability that a pair with Jaccard "
        "similarity s shares at least one band key and so becomes a candidate. The dotted "
        "lines mark the tuning target, P >= {recall} at the index threshold {threshold}; the "
        "dots mark where the curve crosses that probability and 0.5, and its value at half the "
        "threshold (where the tuner keeps false candidates few)."
    ),
    "similarity_histogram": (
        "Pairs of the {sample:,} sampled documents by their exact Jaccard similarity (left "
        "axis, log scale): every pair at or above {floor} (found by the exact all-pairs join), "
        "the candidates the banding makes (at any similarity), and the verified pairs (exact "
        "Jaccard >= {threshold}). The S-curve (right axis) is the share of pairs at each "
        "similarity expected to become candidates."
    ),
    "bucket_sizes": (
        "How many buckets (documents sharing one band key) of each size the active banding "
        "has, on log-log axes. A bucket of m documents makes m(m-1)/2 candidate pairs, so the "
        "tail sets the cost; buckets beyond the dashed line (the default --max-bucket-size) "
        "are linked to one member instead of paired out."
    ),
    "recall_by_similarity": (
        "Candidate rate by exact-similarity bin of width {width} (dots, with 95% Wilson "
        "intervals; the numbers are the bin's pairs), against the S-curve (line) and its mean "
        "over each bin's pairs (crosses). A dot well off its cross means the banding does not "
        "behave as the theory says."
    ),
}
_ALT = {
    "s_curve": "S-curve of the active banding",
    "similarity_histogram": "Histogram of sampled pairs by exact similarity with the S-curve",
    "bucket_sizes": "Bucket-size distribution, log-log",
    "recall_by_similarity": "Candidate rate by similarity bin against the S-curve",
}
_DPI = 110
_SIZE = (7.5, 4.4)


def write_report(evaluation: Evaluation, stats: dict[str, Any], output: Path | str) -> list[Path]:
    """Write the HTML page at ``output`` and its figures (PNG and SVG) in ``<stem>_files/``;
    returns the files written, the page first."""
    new_figure = _figure_maker()
    output = Path(output)
    files = output.with_name(f"{output.stem}_files")
    try:
        files.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{files}: can't create the figures' folder: {exc.strerror}") from None
    drawings = {
        "s_curve": _draw_s_curve,
        "similarity_histogram": _draw_similarity_histogram,
        "bucket_sizes": _draw_bucket_sizes,
        "recall_by_similarity": _draw_recall_by_similarity,
    }
    written: list[Path] = []
    embedded = {}
    for name, draw in drawings.items():
        figure = new_figure()
        draw(figure, evaluation, stats)
        png = io.BytesIO()
        figure.savefig(png, format="png", dpi=_DPI)
        (files / f"{name}.png").write_bytes(png.getvalue())
        figure.savefig(files / f"{name}.svg", format="svg", metadata={"Date": None})
        written += [files / f"{name}.png", files / f"{name}.svg"]
        embedded[name] = base64.b64encode(png.getvalue()).decode("ascii")
    page = _page(evaluation, stats, embedded, files.name)
    try:
        output.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{output}: can't write the report: {exc.strerror}") from None
    return [output, *written]


def captions(evaluation: Evaluation) -> dict[str, str]:
    """The caption of each figure, filled in with this evaluation's numbers."""
    values = {
        "recall": DEFAULT_RECALL,
        "threshold": evaluation.threshold,
        "sample": evaluation.sampled,
        "floor": evaluation.floor,
        "width": BIN_WIDTH,
    }
    return {name: text.format(**values) for name, text in CAPTIONS.items()}


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


def _draw_s_curve(figure: Any, evaluation: Evaluation, _stats: dict) -> None:
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


def _draw_similarity_histogram(figure: Any, evaluation: Evaluation, _stats: dict) -> None:
    ax = figure.add_subplot()
    edges = np.linspace(0, 1, round(1 / BIN_WIDTH) + 1)
    verified = evaluation.candidate_similarity[
        evaluation.candidate_similarity >= evaluation.threshold
    ]
    series = [
        (evaluation.pair_similarity, f"exact pairs >= {evaluation.floor:g}", "0.75", "stepfilled"),
        (evaluation.candidate_similarity, "candidates", "C0", "step"),
        (verified, f"verified (>= {evaluation.threshold:g})", "C2", "stepfilled"),
    ]
    tallest = 0
    for values, label, color, style in series:
        counts, _, _ = ax.hist(
            np.clip(values, 0, 1),
            bins=edges,
            histtype=style,
            color=color,
            alpha=0.8 if style == "stepfilled" else 1,
            linewidth=1.5,
            label=f"{label}: {values.size:,}",
        )
        tallest = max(tallest, int(counts.max()) if counts.size else 0)
    ax.axvspan(0, evaluation.floor, color="0.93", zorder=0)
    ax.text(
        evaluation.floor / 2,
        0.03,
        "exact join\nnot run here",
        transform=ax.get_xaxis_transform(),
        ha="center",
        va="bottom",
        fontsize=8,
        color="0.4",
    )
    ax.axvline(evaluation.threshold, color="gray", linestyle=":", linewidth=1)
    if tallest:
        ax.set_yscale("log")
        ax.set_ylim(0.8, tallest * 6)  # room for the legend
    ax.set(
        xlim=(0, 1),
        xlabel="exact Jaccard similarity",
        ylabel="pairs (log scale)",
        title=f"Pairs of {evaluation.sampled:,} sampled documents",
    )
    curve_ax = ax.twinx()
    s, p = _curve(evaluation)
    curve_ax.plot(s, p, color="C3", linewidth=1.5, label="S-curve P(s)")
    curve_ax.set(ylim=(0, 1.03), ylabel="P(candidate)")
    lines, labels = ax.get_legend_handles_labels()
    more_lines, more_labels = curve_ax.get_legend_handles_labels()
    ax.legend(
        lines + more_lines,
        labels + more_labels,
        loc="upper left",
        fontsize=8,
        bbox_to_anchor=(0.12, 1),
    )


def _draw_bucket_sizes(figure: Any, _evaluation: Evaluation, stats: dict) -> None:
    ax = figure.add_subplot()
    sizes = np.array([s for s, _ in stats["bucket_sizes"]], dtype=np.float64)
    counts = np.array([c for _, c in stats["bucket_sizes"]], dtype=np.float64)
    if sizes.size:
        ax.plot(sizes, counts, "o-", color="C0", markersize=4, linewidth=1, label="buckets")
    ax.axvline(
        DEFAULT_MAX_BUCKET_SIZE,
        color="C3",
        linestyle="--",
        linewidth=1,
        label=f"default --max-bucket-size ({DEFAULT_MAX_BUCKET_SIZE})",
    )
    ax.legend(loc="upper right", fontsize=8)
    pairs = int((counts * sizes * (sizes - 1) / 2).sum())
    active = next(b for b in stats["bandings"] if b["id"] == stats["active_banding"])
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="bucket size (documents sharing a band key)",
        ylabel="buckets",
        title=f"Buckets of {active['bands']} x {active['rows']}: "
        f"{int(counts.sum()):,} buckets, {pairs:,} pairs inside them (with repeats)",
    )
    ax.grid(alpha=0.3, which="both")


def _draw_recall_by_similarity(figure: Any, evaluation: Evaluation, _stats: dict) -> None:
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
body { font: 15px/1.45 system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
table { border-collapse: collapse; margin: 0.5rem 0 1.5rem; }
th, td { border: 1px solid #ccc; padding: 0.2rem 0.6rem; text-align: right; }
th:first-child, td:first-child { text-align: left; }
figure { margin: 1rem 0 2rem; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: 0.9rem; color: #444; }
"""


def _page(
    evaluation: Evaluation, stats: dict[str, Any], embedded: dict[str, str], folder: str
) -> str:
    texts = captions(evaluation)
    result = evaluation.to_dict()
    exact, estimate = result["verified_exact"], result["verified_estimate"]
    error = result["estimate_error"]
    summary = [
        ("documents indexed", f"{evaluation.documents:,}"),
        ("documents sampled (seed)", f"{evaluation.sampled:,} ({evaluation.seed})"),
        ("banding", f"{evaluation.bands} bands x {evaluation.rows} rows"),
        ("index threshold", f"{evaluation.threshold:g}"),
        ("candidate pairs in the sample", f"{result['candidate_pairs']:,}"),
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
    bins = [
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
    bandings = [
        [
            str(b["id"]),
            f"{b['bands']} x {b['rows']}",
            b["state"],
            "yes" if b["is_active"] else "",
            "-" if b["pairs_threshold"] is None else f"{b['pairs_threshold']:g}",
        ]
        for b in stats["bandings"]
    ]
    figures = {
        name: f'<figure id="{name}"><img src="data:image/png;base64,{embedded[name]}" '
        f'alt="{html.escape(_ALT[name])}"><figcaption>{html.escape(caption)} '
        f'(<a href="{folder}/{name}.svg">SVG</a>, <a href="{folder}/{name}.png">PNG</a>)'
        "</figcaption></figure>"
        for name, caption in texts.items()
    }
    scheme = SignatureSpec.from_dict(stats["spec"]).describe()
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"""<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>simindex evaluation report</title><style>{_STYLE}</style></head>
<body>
<h1>simindex evaluation report</h1>
<p>{html.escape(stats["url"])}<br>{html.escape(scheme)}; text {"kept" if stats["keep_text"] else "not kept"}<br>generated {generated}</p>
<h2>Evaluation against exact Jaccard</h2>
{_table(["measure", "value"], summary)}
{figures["s_curve"]}
{figures["similarity_histogram"]}
<h2>Recall by similarity</h2>
{_table(["exact similarity", "pairs", "candidates", "candidate rate", "predicted", "95% interval"], bins)}
{figures["recall_by_similarity"]}
<h2>The index</h2>
{_table(["measure", "value"], [("documents", f"{stats['documents']:,}"), ("groups of exact duplicates", f"{stats['exact_duplicate_groups']:,}"), ("stored pairs (active banding)", f"{stats['pairs']:,}")])}
{_table(["banding", "bands x rows", "state", "active", "pairs found at"], bandings)}
{figures["bucket_sizes"]}
{_table(["bucket size", "buckets"], [(f"{s:,}", f"{c:,}") for s, c in stats["bucket_sizes"]])}
</body>
</html>
"""


def _table(header: list[str], rows: list) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(cell))}</td>" for cell in row) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _number(value: float | None, spec: str = ".4f") -> str:
    return "-" if value is None else format(value, spec)


def _interval(interval: tuple[float, float] | None) -> str:
    return "-" if interval is None else f"{interval[0]:.3f}-{interval[1]:.3f}"
