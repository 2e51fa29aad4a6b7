"""How good the results are, and what a banding would cost, from a sample of the index."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from sqlalchemy import Connection

from simindex.defaults import DEFAULT_SAMPLE
from simindex.errors import ParameterError, SimindexError
from simindex.local.common import VERIFY_TEXT_BYTES, check_seed, check_threshold, document_bytes
from simindex.local.context import Context
from simindex.pipeline import banding as lsh
from simindex.pipeline.chunking import spans

if TYPE_CHECKING:
    from simindex.pipeline.evaluate import CandidateEstimate, Evaluation


def evaluate(
    ctx: Context,
    *,
    sample: int = DEFAULT_SAMPLE,
    floor: float = 0.5,
    seed: int = 0,
    threshold: float | None = None,
) -> Evaluation:
    """How good the results are: recall of the active banding, recall and precision of
    verification at ``threshold`` (default: the index's), and the estimate's error, against the exact
    Jaccard of all pairs >= ``floor`` among ``sample`` random documents (all of them
    when the index holds fewer). Needs stored text. See docs/evaluation.md."""
    from simindex.pipeline.evaluate import evaluate as evaluate_sample

    if sample < 2:
        raise ParameterError(f"sample must be at least 2 documents, got {sample}")
    check_seed(seed)
    threshold = ctx.threshold if threshold is None else check_threshold(threshold)
    with ctx.transaction() as connection:
        active = ctx.active_banding(connection)
        documents = ctx.store.document_count(connection)
        ids = ctx.store.sample_document_ids(connection, sample, seed)
        signatures, texts, names = sampled_documents(ctx, connection, ids)
    return evaluate_sample(
        signatures,
        texts,
        ctx.spec,
        names,
        documents=documents,
        bands=active["bands"],
        rows=active["rows"],
        threshold=threshold,
        floor=floor,
        seed=seed,
    )


def estimate_candidates(
    ctx: Context, bandings: list[tuple[int, int]], *, sample: int = 5000, seed: int = 0
) -> list[CandidateEstimate]:
    """How many candidate pairs each (bands, rows) would make on this index's documents,
    from the stored signatures of ``sample`` random documents (see
    simindex.pipeline.evaluate.estimate_candidates): the cost of recall, before re-banding."""
    from simindex.pipeline.evaluate import estimate_candidates

    if sample < 2:
        raise ParameterError(f"sample must be at least 2 documents, got {sample}")
    check_seed(seed)
    for bands, rows in bandings:
        lsh.check_banding(bands, rows, ctx.spec.num_perm)
    with ctx.transaction() as connection:
        documents = ctx.store.document_count(connection)
        ids = ctx.store.sample_document_ids(connection, sample, seed)
        sigs = ctx.store.signatures_of(connection, ids, ctx.spec.num_perm)
    if ids.size < 2:
        raise SimindexError(
            f"the index holds {documents} document(s): too few to estimate candidates"
        )
    return estimate_candidates(sigs, documents, bandings)


def sampled_documents(
    ctx: Context, connection: Connection, ids: np.ndarray
) -> tuple[np.ndarray, list[str] | None, list[str]]:
    """The stored signatures, texts (None when not kept) and external ids of document
    ids, in their order, fetched in chunks of about VERIFY_TEXT_BYTES of text."""
    from simindex.pipeline.minhash import unpack

    signatures, texts, names = [np.empty((0, ctx.spec.num_perm), np.uint32)], [], []
    sizes = document_bytes(ctx, connection, ids)
    for lo, hi in spans(np.cumsum(sizes), VERIFY_TEXT_BYTES):
        rows = ctx.store.documents_of(connection, ids[lo:hi])
        chunk = [rows[int(i)] for i in ids[lo:hi]]
        signatures.append(unpack([row[2] for row in chunk], ctx.spec.num_perm))
        texts.extend(row[1] or "" for row in chunk)
        names.extend(row[0] for row in chunk)
    return np.concatenate(signatures), texts if ctx.keep_text else None, names
