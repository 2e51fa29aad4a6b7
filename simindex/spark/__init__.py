"""simindex on Apache Spark: the same stages as the library (simindex.pipeline.stages), run by Spark.

Needs the ``spark`` extra (``pip install 'simindex[spark]'``): pyspark, and pandas, which
pyspark's Arrow functions require. In a notebook::

    import simindex.spark
    result = simindex.spark.dedup(spark.read.parquet("crawl/"), id_field="url", threshold=0.8)
    result.kept.write.parquet("crawl-deduplicated/")

The names load on first use (PEP 562), so ``import simindex.spark`` does not start Spark.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simindex.spark.pipeline import Deduplicated, Summary, dedup
    from simindex.spark.session import session

_MODULES = {
    "Deduplicated": "pipeline",
    "Summary": "pipeline",
    "dedup": "pipeline",
    "session": "session",
}
__all__ = ["Deduplicated", "Summary", "dedup", "session"]


def __getattr__(name: str) -> Any:
    if name not in _MODULES:
        raise AttributeError(f"module 'simindex.spark' has no attribute {name!r}")
    return getattr(import_module(f"simindex.spark.{_MODULES[name]}"), name)
