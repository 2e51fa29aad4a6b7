"""Run by tests/db/test_datasketch.py in a process of its own: opens the MinHashLSH at a URL
(argv: url, schema or "", a .npy file of hash values, one row per query) and prints each
query's keys, as sorted reprs on one line."""

import sys

import numpy as np

from simindex.datasketch import MinHashLSH

url, schema, queries = sys.argv[1], sys.argv[2] or None, np.load(sys.argv[3])
with MinHashLSH(num_perm=queries.shape[1], params=(8, 4), url=url, schema=schema) as lsh:
    for values in queries:
        print(" ".join(sorted(map(repr, lsh.query(values)))))
