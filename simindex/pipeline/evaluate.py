"""How good are the results? The banding and the verification measured against exact Jaccard.

A document's band keys are a pure function of its stored signature, so the candidate pairs
among a random sample of documents are exactly the sample's pairs that share a band key in
the index: they are recomputed here from the sample's stored signatures, and compared with
the exact all-pairs join of the sample's shingle sets (simindex.pipeline.exact). That measures what
the banding misses, what verification keeps, and how far the signature estimate strays,
without reading the rest of the index. What each number means: docs/evaluation.md.

:func:`estimate_candidates` answers the cost side for ``simindex tune --db``: how many
candidate pairs a banding would make on the index's data, scaled up from a sample.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numba import njit

from simindex.errors import ParameterError, SimindexError
from simindex.pipeline.banding import band_keys, candidate_probability
from simindex.pipeline.candidates import collect, group_keys
from simindex.pipeline.chunking import spans
from simindex.pipeline.exact import rank_tokens, similar_pairs
from simindex.pipeline.minhash import estimate_rows
from simindex.pipeline.shingle import ShingleSets, normalize_batch, shingle_sets
from simindex.pipeline.verify import Profiles, compare
from simindex.spec import SignatureSpec

BIN_WIDTH = 0.05
Z95 = 1.959963984540054  # the standard normal's 97.5% quantile: two-sided 95% intervals
TEXT_CHARS = 2**18  # sample text shingled at a time (~40 bytes of transient arrays a character)


@dataclass(frozen=True)
class SimilarityBin:
    """Exact pairs of the sample with similarity in [low, high) (the last bin includes 1):
    how many became candidates, the S-curve's mean P(s) over them, and a 95% (Wilson score)
    interval for the candidate rate."""

    low: float
    high: float
    pairs: int
    candidates: int
    predicted: float | None
    interval: tuple[float, float] | None

    @property
    def rate(self) -> float | None:
        return _ratio(self.candidates, self.pairs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "low": self.low,
            "high": self.high,
            "pairs": self.pairs,
            "candidates": self.candidates,
            "candidate_rate": self.rate,
            "predicted": self.predicted,
            "interval": list(self.interval) if self.interval else None,
        }


@dataclass(frozen=True)
class Evaluation:
    """What :func:`evaluate` measured on a sample (see docs/evaluation.md).

    pair_*: the sample's exact pairs with similarity >= floor (the two documents as
    positions in sample_ids, exact Jaccard, signature estimate, whether the banding makes
    them a candidate). candidate_*: every candidate pair of the sample, with its exact
    Jaccard and estimate (what verification sees).
    """

    documents: int
    sample_ids: list[str]
    seed: int
    floor: float
    threshold: float
    bands: int
    rows: int
    num_perm: int
    pair_a: np.ndarray
    pair_b: np.ndarray
    pair_similarity: np.ndarray
    pair_estimate: np.ndarray
    pair_is_candidate: np.ndarray
    candidate_similarity: np.ndarray
    candidate_estimate: np.ndarray
    bins: list[SimilarityBin]

    @property
    def sampled(self) -> int:
        return len(self.sample_ids)

    @property
    def exact_pairs_at_threshold(self) -> int:
        return int((self.pair_similarity >= self.threshold).sum())

    @property
    def candidate_recall(self) -> float | None:
        """Share of the exact pairs >= threshold that the banding makes candidates."""
        strong = self.pair_similarity >= self.threshold
        return _ratio(int(self.pair_is_candidate[strong].sum()), int(strong.sum()))

    @property
    def predicted_recall(self) -> float | None:
        """The S-curve's expectation of :attr:`candidate_recall` for these pairs."""
        strong = self.pair_similarity[self.pair_similarity >= self.threshold]
        if not strong.size:
            return None
        return float(candidate_probability(strong, self.bands, self.rows).mean())

    def missed_pairs(self, limit: int) -> list[tuple[str, str, float]]:
        """The ``limit`` most similar exact pairs that the banding does not make candidates
        (so no query or ``pairs`` run can find them): (id_a, id_b, exact Jaccard)."""
        missed = np.flatnonzero(~self.pair_is_candidate)
        top = missed[np.argsort(-self.pair_similarity[missed], kind="stable")[:limit]]
        ids = self.sample_ids
        return [
            (ids[self.pair_a[i]], ids[self.pair_b[i]], float(self.pair_similarity[i])) for i in top
        ]

    def verification(self, by: Literal["exact", "estimate"]) -> dict[str, float | int | None]:
        """Recall and precision at the threshold of the pairs kept when candidates are
        verified ``by`` "exact" Jaccard (what an index with text does) or the "estimate"."""
        verdict = self.candidate_similarity if by == "exact" else self.candidate_estimate
        kept = verdict >= self.threshold
        right = int((kept & (self.candidate_similarity >= self.threshold)).sum())
        return {
            "pairs": int(kept.sum()),
            "recall": _ratio(right, self.exact_pairs_at_threshold),
            "precision": _ratio(right, int(kept.sum())),
        }

    def estimate_error(self) -> dict[str, float | int | None]:
        """Estimate minus exact Jaccard over the exact pairs >= floor: mean, standard
        deviation, and the theoretical standard error sqrt(J(1-J)/num_perm), averaged."""
        error = self.pair_estimate - self.pair_similarity
        theory = np.sqrt(self.pair_similarity * (1 - self.pair_similarity) / self.num_perm)
        return {
            "pairs": int(error.size),
            "mean": float(error.mean()) if error.size else None,
            "std": float(error.std(ddof=1)) if error.size > 1 else None,
            "theoretical_std": float(theory.mean()) if error.size else None,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "documents": self.documents,
            "sample": self.sampled,
            "seed": self.seed,
            "floor": self.floor,
            "threshold": self.threshold,
            "bands": self.bands,
            "rows": self.rows,
            "num_perm": self.num_perm,
            "candidate_pairs": int(self.candidate_similarity.size),
            "exact_pairs": int(self.pair_similarity.size),
            "exact_pairs_at_threshold": self.exact_pairs_at_threshold,
            "candidate_recall": self.candidate_recall,
            "predicted_recall": self.predicted_recall,
            "verified_exact": self.verification("exact"),
            "verified_estimate": self.verification("estimate"),
            "estimate_error": self.estimate_error(),
            "bins": [b.to_dict() for b in self.bins],
        }


def evaluate(
    signatures: np.ndarray,
    texts: Sequence[str] | None,
    spec: SignatureSpec,
    external_ids: Sequence[str],
    *,
    documents: int,
    bands: int,
    rows: int,
    threshold: float,
    floor: float,
    seed: int,
) -> Evaluation:
    """Measure a banding (bands x rows) and verification at ``threshold`` on a sample: the
    stored signatures (uint32, (n, num_perm)) and texts (None when not kept) of the sampled
    documents. The texts are shingled in chunks of TEXT_CHARS, twice (see
    exact.rank_tokens), so the sample's shingles are held as int32 token ranks only."""
    _check_floor(floor, threshold)
    if texts is None:
        raise SimindexError(
            "evaluate needs stored text to compute exact Jaccard, and this index does not "
            "keep text (it was created with --no-keep-text)"
        )
    count = signatures.shape[0]
    if count < 2:
        raise SimindexError(f"evaluate needs at least two documents, the sample has {count}")
    ranked = rank_tokens(lambda: _shingled(texts, spec))
    rows_a, rows_b, similarity = similar_pairs(ranked, floor)
    profiles = Profiles(signatures, ranked.sets)
    keys = band_keys(signatures, bands, rows)
    # No bucket counts as hot: this measures the banding itself (see docs/evaluation.md).
    found_a, found_b = collect([group_keys(keys, np.arange(count))], max_bucket_size=count).arrays()
    candidate_estimate, candidate_exact = compare(profiles, found_a, found_b)
    is_candidate = np.isin(rows_a * count + rows_b, found_a * count + found_b)
    return Evaluation(
        documents=documents,
        sample_ids=list(external_ids),
        seed=seed,
        floor=floor,
        threshold=threshold,
        bands=bands,
        rows=rows,
        num_perm=signatures.shape[1],
        pair_a=rows_a,
        pair_b=rows_b,
        pair_similarity=similarity,
        pair_estimate=estimate_rows(signatures, rows_a, rows_b),
        pair_is_candidate=is_candidate,
        candidate_similarity=candidate_exact,
        candidate_estimate=candidate_estimate,
        bins=similarity_bins(similarity, is_candidate, floor, bands, rows),
    )


def _shingled(texts: Sequence[str], spec: SignatureSpec) -> Iterator[ShingleSets]:
    """The shingle sets of ``texts``, in chunks of about TEXT_CHARS characters."""
    for lo, hi in spans(np.cumsum([len(text) for text in texts]), TEXT_CHARS):
        yield shingle_sets(normalize_batch(texts[lo:hi]), spec)


def _check_floor(floor: float, threshold: float) -> None:
    """The exact join starts at ``floor``, so it must reach down to the threshold."""
    if not 0 < floor <= threshold:
        raise ParameterError(
            f"floor must be within (0, {threshold}] (the index threshold, so that every pair "
            f"at the threshold is found exactly), got {floor}; pass --floor {threshold} or lower"
        )


def bin_edges(floor: float) -> np.ndarray:
    """Edges of BIN_WIDTH-wide similarity bins from floor to 1 (the last may be narrower),
    rounded so that a Jaccard of exactly 0.6 lands in [0.6, 0.65), not below 0.6000000000000001."""
    count = math.ceil((1 - floor) / BIN_WIDTH - 1e-9)
    return np.round(np.minimum(floor + BIN_WIDTH * np.arange(count + 1), 1.0), 12)


def similarity_bins(
    similarity: np.ndarray, is_candidate: np.ndarray, floor: float, bands: int, rows: int
) -> list[SimilarityBin]:
    """Candidate rate by similarity bin, with the S-curve's prediction for the same pairs."""
    edges = bin_edges(floor)
    which = np.clip(np.searchsorted(edges, similarity, side="right") - 1, 0, edges.size - 2)
    bins = []
    for i in range(edges.size - 1):
        inside = which == i
        pairs, hits = int(inside.sum()), int(is_candidate[inside].sum())
        predicted = None
        if pairs:
            predicted = float(candidate_probability(similarity[inside], bands, rows).mean())
        bins.append(
            SimilarityBin(
                low=float(edges[i]),
                high=float(edges[i + 1]),
                pairs=pairs,
                candidates=hits,
                predicted=predicted,
                interval=wilson_interval(hits, pairs) if pairs else None,
            )
        )
    return bins


def wilson_interval(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion: unlike the normal approximation it
    stays within [0, 1] and is not empty at a rate of 0 or 1."""
    p = successes / trials
    denominator = 1 + z * z / trials
    center = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    # At a rate of 0 (or 1) the lower (upper) end is exactly 0 (1); rounding would miss it.
    low = 0.0 if successes == 0 else max(0.0, center - half)
    high = 1.0 if successes == trials else min(1.0, center + half)
    return low, high


@dataclass(frozen=True)
class CandidateEstimate:
    """Candidate pairs a banding would make on all ``documents``, scaled up from the
    ``sample_pairs`` of ``sample`` documents that share a band key, with a rough 95% range."""

    bands: int
    rows: int
    documents: int
    sample: int
    sample_pairs: int
    estimate: float
    low: float
    high: float


def estimate_candidates(
    signatures: np.ndarray, documents: int, bandings: Sequence[tuple[int, int]]
) -> list[CandidateEstimate]:
    """Estimate each (bands, rows) banding's candidate pairs among ``documents`` from the
    signatures (uint32, (sample, num_perm)) of a uniform random sample of them.

    The count in the sample is exact; it is scaled by N(N-1)/2 over S(S-1)/2. The range
    treats it as a U-statistic: its variance comes from the spread of each sampled
    document's number of partners (clusters of copies make it wide), with a finite
    population correction; with no pair in the sample the upper end is the rule of three.
    """
    sample = signatures.shape[0]
    if sample < 2 or documents < sample:
        raise ParameterError(f"need 2 <= sample <= documents, got {sample} of {documents}")
    sample_total = sample * (sample - 1) / 2
    population_total = documents * (documents - 1) / 2
    correction = 1 - sample / documents  # finite population: no spread when S = N
    shares_key = np.zeros((sample, sample), dtype=np.bool_)
    estimates = []
    for bands, rows in bandings:
        shares_key[:] = False
        buckets = group_keys(band_keys(signatures, bands, rows), np.arange(sample))
        _mark_bucket_pairs(*buckets, shares_key)
        partners = shares_key.sum(axis=0) + shares_key.sum(axis=1)
        count = int(partners.sum() // 2)
        rate = count / sample_total
        # Hoeffding: Var(U) = (2 (S-2) zeta1 + zeta2) / (S(S-1)/2), zeta1 the variance of
        # a document's share of partners, zeta2 that of one pair's indicator.
        zeta1 = float(np.var(partners / (sample - 1)))
        variance = (2 * (sample - 2) * zeta1 + rate * (1 - rate)) / sample_total
        spread = Z95 * math.sqrt(variance * correction)
        if count == 0 and correction > 0:
            low, high = 0.0, 3 / sample_total * population_total
        else:
            low = max(float(count), (rate - spread) * population_total)
            high = min(population_total, (rate + spread) * population_total)
        estimates.append(
            CandidateEstimate(
                bands, rows, documents, sample, count, rate * population_total, low, high
            )
        )
    return estimates


@njit(cache=True, nogil=True)
def _mark_bucket_pairs(members, offsets, shares_key):
    """shares_key[a, b] = True (a < b) for every pair inside a bucket: distinct pairs in
    O(S**2) bits of memory, however many buckets repeat them."""
    for i in range(offsets.shape[0] - 1):
        for j in range(offsets[i], offsets[i + 1]):
            for q in range(j + 1, offsets[i + 1]):
                a, b = members[j], members[q]
                shares_key[min(a, b), max(a, b)] = True


def _ratio(part: int, whole: int) -> float | None:
    return part / whole if whole else None
