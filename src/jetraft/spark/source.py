"""The ``jetstream`` PySpark data source (PySpark 4 Python Data Source API)."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from jetraft.spark.options import parse_read_options, parse_write_options
from jetraft.spark.reader import JetStreamBatchReader, stream_reader
from jetraft.spark.rows import source_schema
from jetraft.spark.writer import JetStreamBatchWriter, stream_writer


class JetStreamDataSource(DataSource):  # type: ignore[misc, unused-ignore]
    """Reads and writes JetStream streams: ``format("jetstream")``.

    The schema is fixed (stream, subject, sequence, timestamp, data[, headers]); options are
    validated and the stream is looked up when the reader or writer is created on the driver,
    so bad options fail the query before any task starts.
    """

    @classmethod
    def name(cls) -> str:
        return "jetstream"

    def schema(self) -> StructType:
        opts = {str(k).lower(): str(v) for k, v in self.options.items()}
        include = opts.get("includeheaders", "false").strip().lower() in ("true", "1", "yes")
        return source_schema(include)

    def reader(self, schema: StructType) -> DataSourceReader:
        return JetStreamBatchReader(parse_read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return stream_reader(parse_read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return JetStreamBatchWriter(parse_write_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return stream_writer(parse_write_options(self.options), schema)
