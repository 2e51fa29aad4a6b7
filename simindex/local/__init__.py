"""The in-process executor: what Index's verbs do, as plain functions of a Context (an open
index's store, spec and options): ingest, query, pairs and their verification, clusters,
bandings, removal, evaluation."""
