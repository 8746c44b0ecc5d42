"""Errors raised by the aeron-archive sink.

Spark wraps a Python exception raised in a writer into its own error and keeps the message, so every message
here names the option, column, recording or path involved: that text is what the user sees.
"""

from __future__ import annotations


class SinkError(Exception):
    """The sink cannot complete a write or a commit (archive, recording, state directory or staged data)."""


class SinkSchemaError(SinkError, ValueError):
    """The DataFrame's columns do not fit the sink (unknown column, missing `value`, wrong type, nulls)."""


class InjectedFault(SinkError):
    """Raised by the test-only fault injection hook (see `aeron_archive_spark.connector.sink.faults`)."""
