"""Looking at an index: stats, check, explain, evaluate, report, tune."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from simindex.cli.app import app
from simindex.cli.errors import NOTHING_CHANGED, command
from simindex.cli.options import POSITIVE, UNIT, Db, Floor, Json, Sample, Schema, Seed, Threshold
from simindex.cli.render import candidate_estimates, err, evaluation, explanation, shown, tuned
from simindex.cli.render import stats as print_stats
from simindex.defaults import DEFAULT_RECALL, DEFAULT_SAMPLE
from simindex.errors import ParameterError


@command(app, interrupted=NOTHING_CHANGED)
def stats(db: Db = None, schema: Schema = None, as_json: Json = False) -> None:
    """Documents, bandings, bucket sizes and the largest buckets of the index."""
    from simindex.index import Index

    with Index.open(db, schema=schema) as index:
        result = index.stats()
    if as_json:
        typer.echo(json.dumps(result.to_dict(), default=str, indent=2))
    else:
        print_stats(result, index.spec.describe())


@command(app, interrupted=NOTHING_CHANGED)
def explain(
    a: Annotated[str, typer.Argument(help="One document's id.")],
    b: Annotated[str, typer.Argument(help="The other's.")],
    db: Db = None,
    schema: Schema = None,
    as_json: Json = False,
) -> None:
    """Why two documents are, or are not, a pair: exact and estimated Jaccard, the bands they
    share under the active banding (and how likely that was), and their shared passages."""
    from simindex.index import Index

    with Index.open(db, schema=schema) as index:
        explanation(index.explain(a, b), as_json)


@command(app, interrupted=NOTHING_CHANGED)
def check(db: Db = None, schema: Schema = None) -> None:
    """Check the index's integrity; exit 1 and list the problems if there are any."""
    from simindex.index import Index

    with Index.open(db, schema=schema) as index:
        problems = index.check()
    for problem in problems:
        err.print(Text.assemble(("Problem:", "bold red"), " ", shown(problem)))
    if problems:
        raise typer.Exit(1)
    err.print(f"{shown(index.url)}: consistent")


@command(app, kernels=True, interrupted=NOTHING_CHANGED)
def evaluate(
    db: Db = None,
    schema: Schema = None,
    sample: Sample = DEFAULT_SAMPLE,
    floor: Floor = 0.5,
    seed: Seed = 0,
    threshold: Threshold = None,
    as_json: Json = False,
) -> None:
    """Measure recall and precision against exact Jaccard on a sample of the documents."""
    from simindex.index import Index

    with Index.open(db, schema=schema) as index:
        result = index.evaluate(sample=sample, floor=floor, seed=seed, threshold=threshold)
    if as_json:
        typer.echo(json.dumps(result.to_dict(), indent=2))
    else:
        evaluation(result)


@command(app, kernels=True, interrupted=NOTHING_CHANGED + "; no report was written")
def report(
    db: Db = None,
    schema: Schema = None,
    output: Annotated[
        Path,
        typer.Option(
            "-o", "--output", help="The HTML page; its figures go to NAME_files/ beside it."
        ),
    ] = Path("report.html"),
    sample: Sample = DEFAULT_SAMPLE,
    floor: Floor = 0.5,
    seed: Seed = 0,
) -> None:
    """Draw the evaluation and the index's statistics: one HTML page with figures (PNG, SVG)."""
    from simindex.index import Index
    from simindex.io.outputs import check_outputs
    from simindex.report import example_pairs, require_matplotlib, write_report
    from simindex.store import database_files

    require_matplotlib()  # before the evaluation, which may take a while
    check_outputs([output], database_files=database_files(db))
    with Index.open(db, schema=schema) as index:
        result = index.evaluate(sample=sample, floor=floor, seed=seed)
        statistics = index.stats()
        examples = example_pairs(index, result)
    files = write_report(result, statistics, output, examples)
    err.print(
        f"Wrote {shown(output)}, with its {len(files) - 1} figure files in {shown(files[1].parent)}"
    )


@command(app, interrupted=NOTHING_CHANGED)
def tune(
    num_perm: Annotated[
        int | None,
        typer.Option(
            help="Signature length to tune for. Default: the index's with --db, else 128.",
            show_default=False,
            **POSITIVE,
        ),
    ] = None,
    threshold: Annotated[
        float | None,
        typer.Option(help="One threshold t: P(t) >= --recall, fewest candidates at t/2.", **UNIT),
    ] = None,
    recall: Annotated[
        float, typer.Option(help="With --threshold: candidate probability at t.", **UNIT)
    ] = DEFAULT_RECALL,
    low: Annotated[
        float | None,
        typer.Option(help="Low similarity: pairs below it should rarely be candidates.", **UNIT),
    ] = None,
    p_low: Annotated[
        float | None, typer.Option(help="At most this candidate probability at --low.", **UNIT)
    ] = None,
    high: Annotated[
        float | None,
        typer.Option(help="High similarity: pairs above it should be candidates.", **UNIT),
    ] = None,
    p_high: Annotated[
        float | None, typer.Option(help="At least this candidate probability at --high.", **UNIT)
    ] = None,
    show: Annotated[
        int, typer.Option(help="List this many of the bandings that meet the targets.", min=0)
    ] = 10,
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            help="Also estimate the candidate pairs each listed banding would make on this "
            "index's documents, from a sample of stored signatures (SIMINDEX_DATABASE_URL is "
            "not read here: tune stays offline unless asked).",
            show_default=False,
        ),
    ] = None,
    sample: Annotated[
        int, typer.Option(help="With --db: documents sampled for the estimate.", min=2)
    ] = 5000,
    seed: Annotated[int, typer.Option(help="With --db: seed of the sample.", min=0)] = 0,
    schema: Schema = None,
) -> None:
    """Choose bands x rows for a threshold, or for targets at a low and a high similarity."""
    from simindex.cli.kernels import compile_once
    from simindex.index import Index
    from simindex.pipeline import banding as lsh

    targets = (low, p_low, high, p_high)
    if threshold is not None and any(t is not None for t in targets):
        raise ParameterError("give --threshold, or --low --p-low --high --p-high, not both")
    if threshold is None and not all(t is not None for t in targets):
        raise ParameterError("give --threshold, or all four of --low --p-low --high --p-high")
    if db is None:
        num_perm = 128 if num_perm is None else num_perm
        result = _tuned(lsh, num_perm, threshold, recall, targets)
        return tuned(result, num_perm, show, threshold is not None, {})
    compile_once()  # the estimates run kernels
    with Index.open(db, schema=schema) as index:
        num_perm = _index_num_perm(index.spec.num_perm, num_perm)
        result = _tuned(lsh, num_perm, threshold, recall, targets)
        chosen = (result.chosen.bands, result.chosen.rows)
        active = next((b["bands"], b["rows"]) for b in index.bandings() if b["is_active"])
        listed = [(b.bands, b.rows) for b in result.feasible[:show]]
        wanted = list(dict.fromkeys([*listed, chosen, active]))
        found = index.estimate_candidates(wanted, sample=sample, seed=seed)
    estimates = {(e.bands, e.rows): e for e in found}
    tuned(result, num_perm, show, threshold is not None, estimates)
    candidate_estimates(estimates, chosen, active, seed)


def _tuned(lsh, num_perm: int, threshold: float | None, recall: float, targets: tuple):  # type: ignore[no-untyped-def]
    """The tuning result: for one threshold, or for the four targets."""
    if threshold is not None:
        return lsh.tune_threshold(num_perm, threshold, recall)
    return lsh.tune(num_perm, *targets)


def _index_num_perm(own: int, asked: int | None) -> int:
    """The signature length to tune for with --db: the index's; a different --num-perm is
    refused."""
    if asked is not None and asked != own:
        raise ParameterError(
            f"--num-perm {asked} differs from the index's {own}; drop --num-perm to tune "
            "for the index (re-banding can't change the signature length)"
        )
    return own
