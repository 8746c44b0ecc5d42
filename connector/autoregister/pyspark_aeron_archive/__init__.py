"""Auto-registration shim: Spark imports every top-level `pyspark_*` module and registers its `DefaultSource`.

Importing this must stay cheap and side-effect free (Spark imports it in a lookup worker).
"""

from aeron_archive_spark.connector.datasource import AeronArchiveDataSource as DefaultSource

__all__ = ["DefaultSource"]
