"""Default settings, in a module that imports nothing heavy.

The CLI reads its options' defaults from here, so ``simindex --help`` and ``--version`` need
neither numba, NumPy, SQLAlchemy nor psycopg; the modules that use a default import it from
here too, so each is written once.
"""

from contextvars import ContextVar

# A single --threshold t means: a pair at similarity t is missed with probability at most
# 1 - DEFAULT_RECALL, and among the bandings that achieve it, the one that makes the fewest
# candidates at t / 2 is chosen. See docs/tuning.md.
DEFAULT_RECALL = 0.9995
DEFAULT_THRESHOLD = 0.8
# Buckets larger than this are linked to one member instead of paired out (see candidates).
DEFAULT_MAX_BUCKET_SIZE = 500
DEFAULT_BATCH_SIZE = 5_000
# Documents evaluate compares all pairs of: pairs grow with its square, and the exact join
# takes seconds at this size.
DEFAULT_SAMPLE = 10_000
# Seconds a writer waits for another writer (its lock) before it gives up.
DEFAULT_LOCK_TIMEOUT = 30.0
# What PostgreSQL's pg_stat_activity shows for simindex's connections (the CLI sets the
# command's name), so a waiting writer can say who holds the lock.
application_name: ContextVar[str] = ContextVar("application_name", default="simindex")
# Signature schemes (docs/spec.md): new indexes get DEFAULT_SCHEME; simindex-v1 stays one
# option away, and every index made before v2 existed is a v1 index.
SCHEME_V1 = "simindex-v1"
SCHEME_V2 = "simindex-v2"
SCHEMES = (SCHEME_V1, SCHEME_V2)
DEFAULT_SCHEME = SCHEME_V2
