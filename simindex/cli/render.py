"""What the commands print: data on stdout (tables, JSON lines), progress and summaries on
stderr. User data (ids, paths, texts) is printed escaped, never as rich markup."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from simindex.index import AddResult, Index, Match, Pair, PairsReport, StoredDocument
    from simindex.pipeline.evaluate import CandidateEstimate, Evaluation
    from simindex.results import Decision, Explanation, IndexStats, LargestCluster, RunRecord

# Markup off: ids, paths and texts are the user's data, never rich markup (an id "[/]" or
# "[link=...]" prints as itself); styles are given explicitly where wanted.
out = Console(soft_wrap=True, markup=False)
err = Console(stderr=True, soft_wrap=True, markup=False)


def shown(text: object) -> str:
    """User data (an id, a path, a text) as it may reach a terminal: control characters
    (escape sequences, newlines, zero-width marks) written as Python escapes."""
    return "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(text)
    )


class _ToStderr(logging.Handler):
    """The library's notices (e.g. a writer waiting for another) on stderr, like progress."""

    def emit(self, record: logging.LogRecord) -> None:
        err.print(shown(record.getMessage()))


logging.getLogger("simindex").addHandler(_ToStderr())


@contextmanager
def progress(label: str) -> Iterator[Callable[..., None]]:
    """A rich progress display on stderr counting documents; yields ``advance(n, step=None,
    steps=None)``: a ``step`` names what the documents are counted for from then on (and is
    appended to the list ``steps`` when it is new)."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    columns = (
        SpinnerColumn(),
        TextColumn("{task.description} {task.completed:,} documents"),
        TimeElapsedColumn(),
    )
    display = Progress(*columns, console=err, transient=True)
    task = display.add_task(label, total=None)
    current = [label.lower(), False]  # the step, and whether the display has started

    def advance(documents: int, step: str | None = None, steps: list | None = None) -> None:
        if not current[1]:  # shown from the first count on: an earlier error prints alone
            display.start()
            current[1] = True
        if step is not None and step != current[0]:
            current[0] = step
            display.reset(task, description=step.capitalize(), total=None)
            if steps is not None:
                steps.append(step)
        display.advance(task, documents)

    try:
        yield advance
    finally:
        if current[1]:
            display.stop()


def names(ids: list[str], most: int = 5) -> str:
    """'a', 'b', ... : the first ``most`` ids, quoted."""
    return ", ".join(repr(i) for i in ids[:most]) + (", ..." if len(ids) > most else "")


def added(result: AddResult, seconds: float) -> str:
    """Ingest's summary line."""
    return (
        f"Added {result.added:,} new documents in {seconds:.1f} s "
        f"({result.added / max(seconds, 1e-9):,.0f} docs/s); the index holds {result.total:,}"
        + (f"; {len(result.replaced):,} replaced an earlier copy" if result.replaced else "")
        + (
            f"; skipped {len(result.skipped_existing):,} already indexed or repeated"
            if result.skipped_existing
            else ""
        )
        + (
            f"; skipped {len(result.skipped_empty):,} empty (no text after normalization: "
            f"{names(result.skipped_empty)})"
            if result.skipped_empty
            else ""
        )
    )


def describe_index(index: Index) -> None:
    """What a new index is: how it signs, its banding (and if it completed a half-created one)."""
    from simindex.pipeline import banding as lsh

    if index.completed_half_created:
        err.print(
            f"Completed the half-created index in {shown(index.url)} (it had a schema but no "
            "settings)"
        )
    active = next(b for b in index.bandings() if b["is_active"])
    p = lsh.candidate_probability(index.threshold, active["bands"], active["rows"])
    err.print(
        f"{index.spec.describe()}; text {'kept' if index.keep_text else 'not kept'}\n"
        f"banding {active['bands']} bands x {active['rows']} rows: a pair at similarity "
        f"{index.threshold} becomes a candidate with probability {p:.4f}"
    )


def titles(index: Index, external_ids: list[str]) -> dict[str, str]:
    """external id -> a one-line title of the document, escaped for the terminal."""
    found = index.documents(external_ids)
    return {i: shown(found[i].title()) if i in found else "" for i in external_ids}


def matches(found: list[Match], as_json: bool, titled: dict[str, str] | None) -> None:
    if as_json:
        for m in found:
            record = {
                "id": m.external_id,
                "similarity": m.similarity,
                "exact_jaccard": m.exact_jaccard,
                "estimated_jaccard": m.estimated_jaccard,
            }
            if titled is not None:
                record["title"] = titled[m.external_id]
            typer.echo(json.dumps(record))
        return
    table = Table("id", "similarity", "exact", "estimate", *(["title"] if titled else []))
    for m in found:
        exact = "-" if m.exact_jaccard is None else f"{m.exact_jaccard:.3f}"
        table.add_row(
            shown(m.external_id),
            f"{m.similarity:.3f}",
            exact,
            f"{m.estimated_jaccard:.3f}",
            *([titled[m.external_id]] if titled else []),
        )
    out.print(table)


def pairs_found(report: PairsReport, max_bucket_size: int) -> None:
    verdict = "exact Jaccard" if report.exact else "estimated Jaccard (text not kept)"
    how = (
        f"incremental: {report.new_documents:,} new documents"
        if report.incremental
        else "full rebuild"
    )
    err.print(
        f"{report.candidates:,} candidate pairs -> {report.pairs:,} new pairs ({how}); "
        f"{report.stored:,} pairs stored at {verdict} >= {report.threshold:g}, banding "
        f"{report.banding_id} ({report.bands} x {report.rows}, expected recall "
        f"{report.expected_recall:.2%}); {report.seconds:.2f} s"
    )
    if report.hot_buckets:
        err.print(
            f"{report.hot_buckets} bucket(s) had more than {max_bucket_size} members (largest "
            f"{report.largest_bucket}); their members were linked to one representative"
        )


def pairs_table(found: list[Pair], titled: dict[str, str] | None) -> None:
    columns = ["id_a", "id_b", "similarity", "estimate"]
    table = Table(*columns, *(["title_a", "title_b"] if titled is not None else []))
    for pair in found:
        table.add_row(
            shown(pair.id_a),
            shown(pair.id_b),
            f"{pair.similarity:.3f}",
            f"{pair.estimated_jaccard:.3f}",
            *([titled[pair.id_a], titled[pair.id_b]] if titled is not None else []),
        )
    out.print(table)


def clusters_table(largest: tuple[LargestCluster, ...], titled: dict[str, str] | None) -> None:
    table = Table(
        "cluster (representative)",
        "documents",
        "weakest member",
        *(["title"] if titled is not None else []),
    )
    for c in largest:
        title = [titled[c.representative]] if titled is not None else []
        table.add_row(shown(c.representative), f"{c.size:,}", f"{c.weakest:.3f}", *title)
    out.print(table)


def largest_clusters(named: tuple[LargestCluster, ...]) -> str:
    """A second line: 'largest clusters: a (12 documents, weakest member 0.810), ...'."""
    if not named:
        return ""
    parts = [
        f"{shown(c.representative)} ({c.size:,} documents, weakest member {c.weakest:.3f})"
        for c in named
    ]
    return "\nlargest clusters: " + ", ".join(parts)


def explanation(found: Explanation, as_json: bool) -> None:
    """`simindex explain`: the similarities, the bands, and both texts with their shared
    passages in reverse video (the texts are the user's: no markup is read in them)."""
    import dataclasses

    from rich.text import Text

    if as_json:
        typer.echo(json.dumps(dataclasses.asdict(found), ensure_ascii=False))
        return
    exact = "-" if found.exact_jaccard is None else f"{found.exact_jaccard:.4f}"
    out.print(
        f"{shown(found.id_a)} ~ {shown(found.id_b)}: exact Jaccard {exact}, estimate "
        f"{found.estimated_jaccard:.4f} (threshold {found.threshold:g})"
    )
    bands = ", ".join(map(str, found.collided_bands))
    collided = (
        f"collide in {len(found.collided_bands)} of {found.bands} bands ({bands})"
        if found.collided_bands
        else f"collide in none of its {found.bands} bands: not a candidate"
    )
    out.print(
        f"banding {found.banding_id} ({found.bands} x {found.rows}): they {collided}; at "
        f"similarity {found.similarity:.4f} a pair is a candidate with probability "
        f"{found.candidate_probability:.4f}"
    )
    for name, text, passages in (
        (found.id_a, found.text_a, found.passages_a),
        (found.id_b, found.text_b, found.passages_b),
    ):
        if text is None:
            out.print(f"\n{shown(name)}: (text not kept by this index)")
            continue
        marked, done = Text(), 0
        for start, end in passages:  # each piece escaped on its own: the offsets are the text's
            marked.append(shown(text[done:start]))
            marked.append(shown(text[start:end]), style="reverse")
            done = end
        marked.append(shown(text[done:]))
        out.print(Text.assemble(f"\n{shown(name)} (normalized; shared passages marked):\n", marked))


def document(found: StoredDocument, as_json: bool) -> None:
    """One stored document: its id, time, metadata and text (or JSON)."""
    import dataclasses

    if as_json:
        typer.echo(json.dumps(dataclasses.asdict(found), default=str, ensure_ascii=False))
        return
    out.print(f"id           {shown(found.external_id)}")
    out.print(f"ingested at  {found.ingested_at}")
    for key, value in (found.metadata or {}).items():
        out.print(f"{shown(key):12} {shown(json.dumps(value, ensure_ascii=False))}")
    text = found.text if found.text is not None else "(text not kept by this index)"
    # Newlines and tabs are the text's own layout; every other control character is escaped.
    out.print("\n" + "\n".join(shown(line).replace("\\t", "\t") for line in text.splitlines()))


def stats(result: IndexStats, scheme: str) -> None:
    out.print(f"index      {shown(result.url)}\nscheme     {scheme}")
    out.print(
        f"documents  {result.documents:,} ({result.exact_duplicate_groups:,} groups of "
        f"exact duplicates)\ntext kept  {'yes' if result.keep_text else 'no'}; default "
        f"threshold {result.threshold}"
    )
    table = Table("banding", "bands x rows", "state", "active", "pairs found at", title="Bandings")
    for b in result.bandings:
        table.add_row(
            str(b["id"]),
            f"{b['bands']} x {b['rows']}",
            b["state"],
            "yes" if b["is_active"] else "",
            "-" if b["pairs_threshold"] is None else str(b["pairs_threshold"]),
        )
    out.print(table)
    building = [str(b["id"]) for b in result.bandings if b["state"] == "building"]
    if building:
        out.print(
            f"building bandings {', '.join(building)}: a `simindex reband` is building them, or "
            "stopped before it finished (they are used by nothing; `simindex drop-banding "
            "ID` removes one)",
        )
    if result.retired_bandings:
        when = (
            "deleted by `simindex drop-banding ID` (a drop stopped before it deleted them)"
            if result.url.startswith("sqlite")
            else "dropped at the next write (readers held them)"
        )
        out.print(
            f"retired bandings {', '.join(map(str, result.retired_bandings))}: their band "
            f"keys are {when}; docs/reliability.md",
        )
    sizes = Table("bucket size", "buckets", title=f"Bucket sizes (banding {result.active_banding})")
    for size, count in result.bucket_sizes:
        sizes.add_row(f"{size:,}", f"{count:,}")
    out.print(sizes)
    largest = Table("band", "key", "documents", title="Largest buckets")
    for band, key, size in result.largest_buckets:
        largest.add_row(str(band), str(key), f"{size:,}")
    out.print(largest)
    if result.largest_clusters:
        named = Table("representative", "documents", "weakest member", title="Largest clusters")
        for cluster in result.largest_clusters:
            named.add_row(
                shown(cluster.representative),
                f"{cluster.size:,}",
                f"{cluster.weakest:.3f}",
            )
        out.print(named)


def evaluation(result: Evaluation) -> None:
    """Summary on stderr, the table of similarity bins on stdout."""
    exact, estimate = result.verification("exact"), result.verification("estimate")
    error = result.estimate_error()
    t = f"{result.threshold:g}"
    err.print(
        f"Evaluated {result.sampled:,} of {result.documents:,} documents (seed {result.seed}): "
        f"banding {result.bands} x {result.rows}, threshold {t}\n"
        f"exact pairs >= {result.floor:g}: {result.pair_similarity.size:,} (>= {t}: "
        f"{result.exact_pairs_at_threshold:,}); candidate pairs: "
        f"{result.candidate_similarity.size:,}\n"
        f"candidate recall at {t}: {_share(result.candidate_recall)} (the S-curve predicts "
        f"{_share(result.predicted_recall)})\n"
        f"verified by exact Jaccard: recall {_share(exact['recall'])}, precision "
        f"{_share(exact['precision'])} ({exact['pairs']:,} pairs)\n"
        f"verified by the estimate alone: recall {_share(estimate['recall'])}, precision "
        f"{_share(estimate['precision'])} ({estimate['pairs']:,} pairs)\n"
        f"estimate - exact over {error['pairs']:,} pairs >= {result.floor:g}: mean "
        f"{_share(error['mean'], '+.4f')}, std {_share(error['std'])} (theory "
        f"{_share(error['theoretical_std'])})"
    )
    table = Table(
        "exact similarity", "pairs", "candidates", "candidate rate", "predicted", "95% interval"
    )
    for b in result.bins:
        interval = "-" if b.interval is None else f"{b.interval[0]:.3f}-{b.interval[1]:.3f}"
        table.add_row(
            f"{b.low:.2f}-{b.high:.2f}",
            f"{b.pairs:,}",
            f"{b.candidates:,}",
            _share(b.rate),
            _share(b.predicted),
            interval,
        )
    out.print(table)


def _share(value: float | None, spec: str = ".4f") -> str:
    return "-" if value is None else format(value, spec)


def tuned(
    result: Any,
    num_perm: int,
    show: int,
    single_threshold: bool,
    estimates: dict[tuple[int, int], CandidateEstimate],
) -> None:
    """The bandings that meet the targets (with their candidate estimates, if any) and the
    chosen one, or the best compromise and the num_perm that would meet them."""
    from simindex.pipeline import banding as lsh

    chosen = result.chosen
    goal_low = "(ranking only)" if single_threshold else f"<= {result.p_low:g}"
    out.print(
        f"targets: P({result.s_low:g}) {goal_low}, P({result.s_high:g}) >= {result.p_high:g}, "
        f"num_perm {num_perm}"
    )
    table = Table(
        "bands",
        "rows",
        "hashes",
        f"P({result.s_low:g})",
        f"P({result.s_high:g})",
        "approx threshold",
        title=f"{len(result.feasible)} banding(s) meet the targets"
        + (f"; the best {show}" if len(result.feasible) > show else ""),
    )
    if estimates:
        table.add_column("candidate pairs on the index")
    for b in result.feasible[:show]:
        table.add_row(
            str(b.bands),
            str(b.rows),
            str(b.hashes_used),
            f"{b.p_at_low:.4g}",
            f"{b.p_at_high:.6g}",
            f"{lsh.approx_threshold(b.bands, b.rows):.3f}",
            *([estimate(estimates[(b.bands, b.rows)])] if estimates else []),
        )
    if result.feasible:
        out.print(table)
        out.print(f"chosen: {chosen.bands} bands x {chosen.rows} rows")
    else:
        out.print(f"No banding within {num_perm} hashes meets the targets.")
        out.print(f"best compromise: {chosen.bands} bands x {chosen.rows} rows")
        needed = result.num_perm_needed
        out.print(
            f"num_perm needed to meet them: {needed}"
            if needed
            else "no num_perm up to 65536 meets them"
        )
    out.print(
        f"  P({result.s_low:g}) = {chosen.p_at_low:.6g}, P({result.s_high:g}) = "
        f"{chosen.p_at_high:.6g}, approx threshold (1/b)^(1/r) = "
        f"{lsh.approx_threshold(chosen.bands, chosen.rows):.3f}\n"
        + (
            f"  the curve crosses {result.p_high:g} at similarity {result.high_crossing:.4f}"
            if single_threshold
            else f"  the curve crosses {result.p_low:g} at similarity {result.low_crossing:.4f} "
            f"and {result.p_high:g} at similarity {result.high_crossing:.4f}"
        )
    )


def candidate_estimates(
    estimates: dict[tuple[int, int], CandidateEstimate],
    chosen: tuple[int, int],
    active: tuple[int, int],
    seed: int,
) -> None:
    now = estimates[active]
    out.print(
        f"candidate pairs (pairs sharing a band key) on the {now.documents:,} documents of "
        f"the index, estimated from {now.sample:,} sampled (seed {seed}):\n"
        f"  chosen {chosen[0]} x {chosen[1]}: {estimate(estimates[chosen])}\n"
        f"  active {active[0]} x {active[1]}: {estimate(now)}"
    )


def estimate(found: CandidateEstimate) -> str:
    """~estimate (rough 95% range), or the exact count when every document was sampled."""
    if found.sample == found.documents:
        return f"{found.estimate:,.0f} (exact)"
    return f"~{found.estimate:,.0f} ({found.low:,.0f}-{found.high:,.0f})"


def counts(parts: list[tuple[int, str]]) -> str:
    """'3 malformed, 2 empty': the parts whose count is not zero."""
    return ", ".join(f"{count:,} {what}" for count, what in parts if count)


def runs_table(found: list[RunRecord]) -> None:
    if not found:
        err.print("No runs recorded (an index made before simindex kept an audit trail).")
        return
    table = Table("run", "command", "started (UTC)", "seconds", "documents", "counts", "keep")
    for run in found:
        span = "" if run.first_document is None else f"{run.first_document}-{run.last_document}"
        table.add_row(
            str(run.id),
            shown(run.command),
            f"{run.started_at:%Y-%m-%d %H:%M:%S}",
            f"{(run.finished_at - run.started_at).total_seconds():.1f}",
            span,
            shown(", ".join(f"{name} {value:,}" for name, value in run.counts.items() if value)),
            shown(run.keep or ""),
        )
    out.print(table)


def decisions_table(run_id: int, found: list[Decision], limit: int) -> None:
    if not found:
        err.print(f"Run {run_id} recorded no decisions (`simindex runs` lists the runs).")
        return
    table = Table("id", "held under", "similarity")
    for decision in found:
        table.add_row(
            shown(decision.external_id or "(removed)"),
            shown(decision.representative or "(removed)"),
            f"{decision.similarity:.3f}",
        )
    out.print(table)
    if len(found) == limit:
        err.print(f"The first {limit:,} decisions; a larger --limit shows more.")
