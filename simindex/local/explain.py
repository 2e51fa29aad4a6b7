"""Why two indexed documents are (or are not) a pair: their similarities, the bands they share
under the active banding, and the passages they share."""

from __future__ import annotations

import numpy as np

from simindex.errors import SimindexError
from simindex.local.common import profiles
from simindex.local.context import Context
from simindex.results import Explanation


def explain(ctx: Context, a: str, b: str) -> Explanation:
    """:class:`Explanation` of the documents with external ids ``a`` and ``b``; raises
    SimindexError naming an id that is not indexed."""
    from simindex.pipeline import banding as lsh
    from simindex.pipeline.passages import shared_passages
    from simindex.pipeline.shingle import normalize
    from simindex.pipeline.verify import compare

    with ctx.transaction() as connection:
        found = ctx.store.document_ids(connection, [a, b])
        missing = [name for name in (a, b) if name not in found]
        if missing:
            raise SimindexError(
                f"document {missing[0]!r} is not indexed; check the id (`simindex show ID` shows one)"
            )
        active = ctx.active_banding(connection)
        ids = np.array([found[a], found[b]], dtype=np.int64)
        stored, _ = profiles(ctx, connection, ids)
        texts = ctx.store.documents_of(connection, ids)
    estimated, exact = compare(stored, np.array([0]), np.array([1]))
    similarity = float(exact[0]) if exact is not None else float(estimated[0])
    keys = lsh.band_keys(stored.signatures, active["bands"], active["rows"])
    collided = tuple(int(band) for band in np.flatnonzero(keys[0] == keys[1]))
    text_a, text_b = (texts[int(i)][1] for i in ids)
    passages: tuple[list, list] = ([], [])
    if text_a is not None and text_b is not None:
        text_a, text_b = normalize(text_a), normalize(text_b)
        passages = shared_passages(text_a, text_b, ctx.spec.shingle, ctx.spec.k)
    return Explanation(
        id_a=a,
        id_b=b,
        exact_jaccard=None if exact is None else float(exact[0]),
        estimated_jaccard=float(estimated[0]),
        threshold=ctx.threshold,
        banding_id=active["id"],
        bands=active["bands"],
        rows=active["rows"],
        collided_bands=collided,
        candidate_probability=float(
            lsh.candidate_probability(similarity, active["bands"], active["rows"])
        ),
        text_a=text_a,
        text_b=text_b,
        passages_a=tuple(passages[0]),
        passages_b=tuple(passages[1]),
    )
