"""README.md's option tables say what the connector's one option table says: same names, modes and defaults."""

from __future__ import annotations

import pathlib
import re

import pytest

from aeron_archive_spark.archive.tables.option_table import Mode, OptionSpec
from aeron_archive_spark.connector.options import OPTIONS

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"
QUERY_TYPES = {"both": Mode.READ, "batch": Mode.BATCH_READ, "streaming": Mode.STREAM_READ}


def _table(heading: str) -> list[list[str]]:
    """The rows (cells stripped) of the first Markdown table under `heading`."""
    text = README.read_text()
    start = text.index(heading)
    rows = []
    for line in text[start:].splitlines()[1:]:
        if line.startswith("#"):
            break
        if line.startswith("|") and not line.startswith("|---"):
            rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]])
    return rows[1:]  # without the header row


def _names(cell: str) -> list[str]:
    return re.findall(r"`([A-Za-z.]+)`", cell)


def _plain(text: str) -> str:
    return text.replace("`", "").strip()


def _check_default(spec: OptionSpec, shown: str) -> None:
    expected = spec.default_text()
    if shown in ("–", ""):
        assert expected == "", f"README shows no default for {spec.name}, the table says {expected!r}"
    else:
        assert _plain(shown) in expected or expected in _plain(shown), \
            f"README default of {spec.name} is {shown!r}, the table says {expected!r}"


SOURCE = _table("## Source options")
SINK = _table("## Sink options")


def test_every_read_option_is_in_the_source_table_with_its_modes_and_default():
    listed: dict[str, Mode] = {}
    for cells in SOURCE:
        names, defaults, query_type = _names(cells[0]), cells[2], cells[3]
        parts = [p.strip() for p in defaults.split(" / ")]
        for i, name in enumerate(names):
            spec = OPTIONS.get(name)
            assert spec is not None, f"README lists unknown source option {name}"
            assert spec.name == name, f"README spells {spec.name} as {name}"
            listed[name] = QUERY_TYPES[query_type]
            assert spec.modes & Mode.READ == QUERY_TYPES[query_type], \
                f"README says {name} applies to {query_type} reads; the table says {spec.modes}"
            if len(parts) == len(names):
                _check_default(spec, parts[i])
    expected = {spec.name for spec in OPTIONS if spec.modes & Mode.READ}
    assert set(listed) == expected, f"missing from README: {sorted(expected - set(listed))}"


def test_every_write_option_is_in_the_sink_table_with_its_default():
    listed = set()
    for cells in SINK:
        names, defaults = _names(cells[0]), cells[2]
        for name in names:
            spec = OPTIONS.get(name)
            assert spec is not None and spec.name == name, f"README lists unknown sink option {name}"
            assert spec.modes & Mode.WRITE, f"README lists {name} as a sink option; the table says {spec.modes}"
            listed.add(name)
            if len(names) == 1:
                _check_default(spec, defaults)
    expected = {spec.name for spec in OPTIONS if spec.modes & Mode.WRITE}
    assert listed == expected, f"missing from README: {sorted(expected - listed)}; extra: {sorted(listed - expected)}"


@pytest.mark.parametrize("rows", [SOURCE, SINK], ids=["source", "sink"])
def test_readme_tables_were_found(rows: list[list[str]]) -> None:
    assert len(rows) >= 5
