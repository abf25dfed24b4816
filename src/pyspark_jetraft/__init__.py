"""PySpark discovers data sources in modules named pyspark_*: this one is jetraft.spark."""

from jetraft.spark.source import JetStreamDataSource as DefaultSource

__all__ = ["DefaultSource"]
