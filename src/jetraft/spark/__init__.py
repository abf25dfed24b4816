"""PySpark connector: the ``jetstream`` data source (batch and Structured Streaming).

    import jetraft.spark
    jetraft.spark.register(spark)
    df = spark.read.format("jetstream").option("servers", "nats://h:4222") \
        .option("stream", "ORDERS").load()

Install with the ``jetraft[spark]`` extra (pyspark >= 4.0 and pyarrow). This package talks to
servers over the wire only (nats-py), so it works against jetraft and nats-server alike.
Spark is imported lazily: the pure helpers (options, codec, planning) import without it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DefaultSource", "JetStreamDataSource", "register"]


def _source_class() -> Any:
    try:
        from jetraft.spark.source import JetStreamDataSource
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError(
            "jetraft.spark needs pyspark>=4.0 and pyarrow: pip install 'jetraft[spark]'"
        ) from exc
    return JetStreamDataSource


def __getattr__(name: str) -> Any:
    # DefaultSource is the name PySpark's discovery looks for in pyspark_* modules.
    if name in ("JetStreamDataSource", "DefaultSource"):
        return _source_class()
    raise AttributeError(name)


def register(spark: Any) -> None:
    """Register the ``jetstream`` format on a SparkSession.

    Where PySpark discovered it already (the ``pyspark_jetraft`` module), this is a no-op.
    """
    try:
        spark.dataSource.register(_source_class())
    except Exception as exc:  # pyspark's AnalysisException; not importable without pyspark
        if "DATA_SOURCE_ALREADY_EXISTS" not in str(exc):
            raise
