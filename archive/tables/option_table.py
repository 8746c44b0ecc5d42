"""The option-table machinery of `format("aeron-archive")`: value parsers, rows, an immutable table, parsing.

Spark hands a data source its options as a case-insensitive dict of strings with lowercased keys, and a mistake
(a typo'd name, `maxBytesPerTrigger=10MB!`) would otherwise surface as a late, cryptic failure on an executor.
So each reader/writer parses all of its options when it is created: an unknown option, a value that does not
parse, an option the mode does not accept, or a contradictory combination raises `OptionError` naming the option
(and the value).

A row (`OptionSpec`) gives the canonical camelCase name, a parser, a default, the modes that accept it and a
one-line meaning. An `OptionTable` is an immutable set of rows; callers pass the table they parse against, so
nothing here is global or filled in at import time: the read rows every reader has live in `archive.tables.options`,
and the connector builds its one table of every option from those rows, the Spark source's and the sink's.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Flag, auto
from types import MappingProxyType
from typing import Any

# Keys Spark itself puts into the options (`load(path)` / `save(path)`); never reported as unknown.
SPARK_KEYS = frozenset({"path"})


class OptionError(ValueError):
    """An option is unknown, malformed, not accepted in this mode, or contradicts another option."""


class Mode(Flag):
    BATCH_READ = auto()
    STREAM_READ = auto()
    BATCH_WRITE = auto()
    STREAM_WRITE = auto()
    READ = BATCH_READ | STREAM_READ
    WRITE = BATCH_WRITE | STREAM_WRITE
    ANY = READ | WRITE


_MODE_WORDS = {
    Mode.BATCH_READ: "batch reads (spark.read)",
    Mode.STREAM_READ: "streaming reads (spark.readStream)",
    Mode.READ: "reads",
    Mode.BATCH_WRITE: "batch writes (df.write)",
    Mode.STREAM_WRITE: "streaming writes (df.writeStream)",
    Mode.WRITE: "writes",
}


# ---------------------------------------------------------------------------------------------------------------
# value parsers: (option name, raw string) -> value; they raise OptionError naming both


def bad_value(name: str, raw: str, expected: str) -> OptionError:
    return OptionError(f"option {name}: expected {expected}, got {raw!r}")


def parse_string(name: str, raw: str) -> str:
    value = raw.strip()
    if not value:
        raise bad_value(name, raw, "a non-empty string")
    return value


def parse_int(name: str, raw: str, minimum: int | None = None, maximum: int | None = None) -> int:
    text = raw.strip()
    try:
        value = int(text, 0) if text.lower().startswith(("0x", "-0x")) else int(text)
    except ValueError:
        raise bad_value(name, raw, "an integer") from None
    if minimum is not None and value < minimum:
        raise bad_value(name, raw, f"an integer >= {minimum}")
    if maximum is not None and value > maximum:
        raise bad_value(name, raw, f"an integer <= {maximum}")
    return value


def int_parser(minimum: int | None = None, maximum: int | None = None) -> Callable[[str, str], int]:
    def parse(name: str, raw: str) -> int:
        return parse_int(name, raw, minimum, maximum)

    return parse


def parse_int32(name: str, raw: str) -> int:
    return parse_int(name, raw, -(2**31), 2**31 - 1)


def parse_bool(name: str, raw: str) -> bool:
    text = raw.strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise bad_value(name, raw, "true or false")


_SIZE = re.compile(r"^\s*([0-9]+)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)
_SIZE_SHIFT = {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}


def parse_bytes(name: str, raw: str) -> int:
    """A positive byte count: `1048576`, `64k`, `16m`, `1g` (binary multiples, as Spark's byte strings)."""
    match = _SIZE.match(raw)
    if match is None or (match.group(3) and match.group(3).lower() == "ib" and not match.group(2)):
        raise bad_value(name, raw, "a byte size such as 1048576, 64k, 16m or 1g")
    value = int(match.group(1)) << _SIZE_SHIFT[match.group(2).lower()]
    if value <= 0:
        raise bad_value(name, raw, "a positive byte size")
    return value


_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(us|ms|s|m|min|h|d)?\s*$", re.IGNORECASE)
_DURATION_MS = {"us": 0.001, "ms": 1, "": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(name: str, raw: str) -> int:
    """A duration in milliseconds: `15m`, `30s`, `250ms`, `1h`; a bare number is milliseconds (Spark's rule)."""
    match = _DURATION.match(raw)
    if match is None:
        raise bad_value(name, raw, "a duration such as 250ms, 30s, 15m or 1h")
    return int(float(match.group(1)) * _DURATION_MS[(match.group(2) or "").lower()])


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_timestamp_ms(name: str, raw: object) -> int:
    """Milliseconds since the epoch: an integer, or an ISO-8601 time with its zone (`2026-11-28T09:30:00Z`)."""
    if isinstance(raw, bool):
        raise OptionError(f"option {name}: {raw!r} is not a time")
    if isinstance(raw, int):
        value = raw
    else:
        text = str(raw).strip()
        value = int(text) if text.isdigit() else _iso_ms(name, raw, text)
    if value < 0:
        raise OptionError(f"option {name}: a time must be >= 0 ms since the epoch, got {value}")
    return value


def _iso_ms(name: str, raw: object, text: str) -> int:
    try:
        when = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        raise OptionError(
            f"option {name}: {raw!r} is not a time: give milliseconds since the epoch or an ISO-8601 time with its "
            "zone, such as 2026-11-28T09:30:00Z"
        ) from None
    if when.tzinfo is None:
        raise OptionError(
            f"option {name}: {raw!r} has no time zone: add one (Z for UTC, or +01:00), so the instant is the same "
            "on every host"
        )
    # exact: a float of seconds times 1000 lands 1 ms early for some times (e.g. 1987-03-12T00:11:34.550Z)
    return (when - _EPOCH) // timedelta(milliseconds=1)


def parse_id_list(name: str, raw: str) -> tuple[int, ...]:
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    if not parts:
        raise bad_value(name, raw, "a comma-separated list of recording ids")
    ids = tuple(parse_int(name, p, 0) for p in parts)
    if len(set(ids)) != len(ids):
        raise bad_value(name, raw, "recording ids without duplicates")
    return ids


def choice_parser(*choices: str) -> Callable[[str, str], str]:
    def parse(name: str, raw: str) -> str:
        text = raw.strip().lower()
        if text not in choices:
            raise bad_value(name, raw, " or ".join(choices))
        return text

    return parse


# ---------------------------------------------------------------------------------------------------------------
# rows and tables


@dataclass(frozen=True, slots=True)
class OptionSpec:
    """One row of an option table. `default` is used as is (not parsed) when the option is absent."""

    name: str
    parse: Callable[[str, str], Any]
    default: Any
    modes: Mode
    doc: str
    default_doc: str | None = None  # how the default reads in docs when it is computed or None

    def default_text(self) -> str:
        """The default as the docs show it."""
        if self.default_doc is not None:
            return self.default_doc
        if self.default is None:
            return ""
        return str(self.default).lower() if isinstance(self.default, bool) else str(self.default)


class OptionTable:
    """An immutable, ordered set of option rows, looked up case-insensitively by name.

    Built once from rows (`OptionTable(rows)`), extended by making a new table (`table + more_rows`): a name may
    appear only once, so two modules can never silently disagree about an option.
    """

    __slots__ = ("_removed", "_rows")

    def __init__(self, rows: Iterable[OptionSpec], removed: Mapping[str, str] | None = None) -> None:
        by_name: dict[str, OptionSpec] = {}
        for spec in rows:
            key = spec.name.lower()
            if key in by_name:
                raise ValueError(f"option {spec.name} is defined twice (already as {by_name[key].name})")
            by_name[key] = spec
        gone = {name.lower(): why for name, why in (removed or {}).items()}
        for name in gone:
            if name in by_name:
                raise ValueError(f"option {by_name[name].name} is both defined and removed")
        self._rows: Mapping[str, OptionSpec] = MappingProxyType(by_name)
        self._removed: Mapping[str, str] = MappingProxyType(gone)

    def __add__(self, rows: Iterable[OptionSpec]) -> OptionTable:
        more = rows._removed if isinstance(rows, OptionTable) else {}
        return OptionTable([*self._rows.values(), *rows], {**self._removed, **more})

    def with_removed(self, removed: Mapping[str, str]) -> OptionTable:
        """This table, plus options of earlier versions: giving one is an error saying what replaced it (any mode)."""
        return OptionTable(self._rows.values(), {**self._removed, **removed})

    def removed(self, name: str) -> str | None:
        """Why option `name` (any case) no longer exists, or None if it was never removed."""
        return self._removed.get(name.lower())

    def __iter__(self) -> Iterator[OptionSpec]:
        return iter(self._rows.values())

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._rows

    def get(self, name: str) -> OptionSpec | None:
        return self._rows.get(name.lower())

    def __getitem__(self, name: str) -> OptionSpec:
        return self._rows[name.lower()]

    def rows(self, mode: Mode = Mode.ANY) -> list[tuple[str, str, str]]:
        """(name, default, meaning) of the rows that apply to `mode`, for docs and error messages."""
        return [(spec.name, spec.default_text(), spec.doc) for spec in self if spec.modes & mode]


@dataclass(frozen=True)
class ParsedOptions:
    """Parsed values by canonical name; `given` holds the names the user set explicitly."""

    values: Mapping[str, Any]
    given: frozenset[str]

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def is_set(self, name: str) -> bool:
        return name in self.given


def parse_options(raw: Mapping[str, str] | Iterable[tuple[str, str]], mode: Mode, table: OptionTable) -> ParsedOptions:
    """Parse every option for `mode` against `table`; raises OptionError on the first unknown/misplaced/malformed one.

    `table` should hold every option of the data source, not only those of `mode`, so that an option of another
    mode is reported as such ("applies to writes only") rather than as unknown.
    """
    items = list(raw.items()) if isinstance(raw, Mapping) else list(raw)
    values: dict[str, Any] = {}
    given: set[str] = set()
    for key, value in items:
        lower = str(key).lower()
        if lower in SPARK_KEYS:
            continue
        spec = table.get(lower)
        if spec is None and (why := table.removed(lower)) is not None:
            raise OptionError(why)
        if spec is None:
            known = sorted(s.name for s in table if s.modes & mode)
            close = difflib.get_close_matches(lower, [name.lower() for name in known], n=1, cutoff=0.6)
            hint = f" (did you mean {table[close[0]].name}?)" if close else ""
            raise OptionError(
                f'unknown option {key!r} for format("aeron-archive"){hint}; known options: ' + ", ".join(known)
            )
        if not spec.modes & mode:
            applies = _MODE_WORDS.get(spec.modes, "other modes")
            raise OptionError(f"option {spec.name} applies to {applies} only, not to {_MODE_WORDS.get(mode, mode)}")
        if value is None:
            raise OptionError(f"option {spec.name}: expected a value, got None")
        values[spec.name] = spec.parse(spec.name, str(value))
        given.add(spec.name)
    for spec in table:
        if spec.modes & mode and spec.name not in values:
            values[spec.name] = spec.default
    return ParsedOptions(values, frozenset(given))
