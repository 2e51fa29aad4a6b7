"""simindex on Apache Spark: the same stages as the library (simindex.stages), run by Spark.

Needs the ``spark`` extra (``pip install 'simindex[spark]'``): pyspark, and pandas, which
pyspark's Arrow functions require.
"""
