"""The pipeline stages: pure functions over arrays and Arrow batches, no database."""
