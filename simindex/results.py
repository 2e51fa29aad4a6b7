"""The typed results of the library's calls: matches, pairs, clusters, reports."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class Match:
    """An indexed document similar to a query; ``similarity`` is the exact Jaccard when the
    index keeps text, else the estimate."""

    external_id: str
    estimated_jaccard: float
    exact_jaccard: float | None

    @property
    def similarity(self) -> float:
        return self.estimated_jaccard if self.exact_jaccard is None else self.exact_jaccard


@dataclass
class AddResult:
    """What :meth:`simindex.Index.add` did. ``added`` counts the documents written, replacements
    included; ``replaced`` lists an external id for each copy a later one replaced (indexed,
    or earlier in the call). ``duplicates`` maps a new document's external id to the
    documents it duplicates (indexed before, or earlier in the same call), when asked;
    ``total`` is the number of documents in the index afterwards."""

    added: int = 0
    total: int = 0
    replaced: list[str] = field(default_factory=list)
    skipped_existing: list[str] = field(default_factory=list)
    skipped_empty: list[str] = field(default_factory=list)
    duplicates: dict[str, list[Match]] = field(default_factory=dict)
    # With find_duplicates=t: the chance that the active banding finds a match at t.
    expected_recall: float | None = None


@dataclass(frozen=True)
class Pair:
    """A stored pair of similar documents; ``similarity`` is the exact Jaccard when the index
    keeps text, else the estimate."""

    id_a: str
    id_b: str
    exact_jaccard: float | None
    estimated_jaccard: float

    @property
    def similarity(self) -> float:
        return self.estimated_jaccard if self.exact_jaccard is None else self.exact_jaccard


@dataclass(frozen=True)
class ClusterMember:
    """A clustered document: its cluster is named by the representative's external id, and
    ``similarity`` is to the representative (exact when text is kept; the stored pair's when
    the two were paired, 1.0 for the representative itself)."""

    external_id: str
    cluster: str
    is_representative: bool
    similarity: float


@dataclass(frozen=True)
class StoredDocument:
    """An indexed document as stored (``text`` is None when the index does not keep it)."""

    external_id: str
    text: str | None
    metadata: dict[str, Any] | None
    ingested_at: datetime

    def title(self, width: int = 60) -> str:
        """The metadata 'title' if there is one, else the start of the text."""
        title = (self.metadata or {}).get("title")
        text = " ".join(str(title if title else self.text or "").split())
        return text if len(text) <= width else text[: width - 3] + "..."


@dataclass(frozen=True)
class Removal:
    """What :meth:`simindex.Index.delete` or :meth:`simindex.Index.evict` removed (or, with ``dry_run``, would
    remove), and the asked-for ids that are not indexed."""

    removed: list[str]
    not_found: list[str]
    dry_run: bool


@dataclass(frozen=True)
class PairsReport:
    """What :meth:`simindex.Index.find_pairs` did: ``pairs`` new pairs from ``candidates`` candidate
    pairs; ``stored`` pairs at >= threshold in all. ``expected_recall`` is the chance that
    the banding makes a pair at the threshold a candidate (the S-curve P(t)); incremental
    runs look at the ``new_documents`` added since the last run only."""

    banding_id: int
    bands: int
    rows: int
    threshold: float
    candidates: int
    pairs: int
    stored: int
    hot_buckets: int
    largest_bucket: int
    exact: bool
    incremental: bool
    new_documents: int
    expected_recall: float
    seconds: float


@dataclass(frozen=True)
class LargestCluster:
    """One of the largest clusters: its representative's external id, its size (documents,
    the representative counted) and the lowest similarity of a member to the representative
    (1.0 for a cluster of exact copies)."""

    representative: str
    size: int
    weakest: float


@dataclass(frozen=True)
class ClusterReport:
    """What :meth:`simindex.Index.cluster` did: clusters of two or more documents, made by
    ``mode`` ("star" or "components"), represented by ``rule`` (ClusterPolicy.describe)."""

    threshold: float
    rule: str
    clusters: int
    documents: int
    largest: int
    seconds: float
    mode: str = "components"
    largest_clusters: tuple[LargestCluster, ...] = ()


@dataclass(frozen=True)
class RunRecord:
    """A run of the audit trail (:meth:`simindex.Index.runs`): a command or library call that
    changed the index, or calls grouped as one with :meth:`simindex.Index.run`. ``counts``
    says what it did (documents added, pairs, clusters, decisions, ...); ``first_document``
    and ``last_document`` bound the internal ids of the documents it indexed (None: none);
    ``finished_at`` is its last commit."""

    id: int
    command: str
    parameters: dict[str, Any]
    scheme: str
    banding_id: int | None
    bands: int | None
    rows: int | None
    threshold: float
    keep: str | None
    version: str
    started_at: datetime
    finished_at: datetime
    first_document: int | None
    last_document: int | None
    counts: dict[str, Any]


@dataclass(frozen=True)
class Decision:
    """A clustering run's decision (:meth:`simindex.Index.decisions`): ``external_id`` is held
    under ``representative`` (what ``dedup`` drops), at ``similarity`` (exact Jaccard when the
    index keeps text, else the estimate). An id is None for a document removed since."""

    external_id: str | None
    representative: str | None
    similarity: float


@dataclass(frozen=True)
class IndexStats:
    """What :meth:`simindex.Index.stats` finds: the index (``url`` with any password masked,
    ``spec`` as SignatureSpec.to_dict gives it, ``keep_text``, the default ``threshold``),
    its ``documents`` and ``exact_duplicate_groups`` (content hashes shared by two or more),
    its ``bandings`` (as :meth:`simindex.Index.bandings` lists them) and the ids of the
    ``retired_bandings`` whose band keys wait to be removed. Of the ``active_banding``: its
    stored ``pairs``, ``bucket_sizes`` and ``cluster_sizes`` as (size, how many of that
    size) ascending (``cluster_sizes`` is None until clusters are built), the
    ``largest_buckets`` as (band, key, documents), and the ``largest_clusters``."""

    url: str
    spec: dict[str, Any]
    keep_text: bool
    threshold: float
    documents: int
    exact_duplicate_groups: int
    bandings: tuple[dict[str, Any], ...]
    retired_bandings: tuple[int, ...]
    active_banding: int
    pairs: int
    bucket_sizes: tuple[tuple[int, int], ...]
    largest_buckets: tuple[tuple[int, int, int], ...]
    cluster_sizes: tuple[tuple[int, int], ...] | None
    largest_clusters: tuple[LargestCluster, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The fields by name, as ``simindex stats --json`` writes them: the sequences as
        lists, the largest clusters as dicts."""
        return {
            name: list(value) if isinstance(value, tuple) else value
            for name, value in asdict(self).items()
        }


@dataclass(frozen=True)
class Explanation:
    """Why two indexed documents are (or are not) a pair, from :meth:`simindex.Index.explain`.

    ``exact_jaccard`` (None when the index keeps no text) and ``estimated_jaccard`` (of the
    signatures); under the active banding (``banding_id``, ``bands`` x ``rows``), the bands
    whose keys the two share (``collided_bands``, 0-based; empty: they are no candidate) and
    ``candidate_probability``, the chance that a pair as similar (exact, else estimated)
    shares a band. ``text_a`` and ``text_b`` are the normalized texts (None without text)
    and ``passages_a``/``passages_b`` the [start, end) character spans of each that are
    covered by shingles the other has too.
    """

    id_a: str
    id_b: str
    exact_jaccard: float | None
    estimated_jaccard: float
    threshold: float
    banding_id: int
    bands: int
    rows: int
    collided_bands: tuple[int, ...]
    candidate_probability: float
    text_a: str | None = None
    text_b: str | None = None
    passages_a: tuple[tuple[int, int], ...] = ()
    passages_b: tuple[tuple[int, int], ...] = ()

    @property
    def similarity(self) -> float:
        return self.exact_jaccard if self.exact_jaccard is not None else self.estimated_jaccard

    @property
    def is_candidate(self) -> bool:
        return bool(self.collided_bands)
