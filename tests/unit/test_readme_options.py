"""README.md's option tables, and the data source's docstring, say what the connector's one option table says: same
names, modes and defaults."""

from __future__ import annotations

import inspect
import pathlib
import re

import pytest

from aeron_archive_spark.archive.tables.option_table import Mode, OptionSpec
from aeron_archive_spark.connector.datasource import AeronArchiveDataSource
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


# -- the data source's class docstring (`help()`, an IDE's hover) lists every option, as README's tables do --------

DOC_SECTION_MODES = {
    "Where the recordings are": Mode.ANY,
    "Which recordings": Mode.ANY,
    "Spark reads": Mode.READ,
    "Payloads": Mode.ANY,
    "Spark writes": Mode.WRITE,
}
DOC_MARKS = {"reads": Mode.READ, "batch": Mode.BATCH_READ, "streaming": Mode.STREAM_READ}


def _doc_bullets() -> list[tuple[Mode, str, str]]:
    """(section's mode, head, whole text) of each option bullet of the data source's docstring."""
    doc = inspect.getdoc(AeronArchiveDataSource) or ""
    options = doc[doc.index("Options\n-------") : doc.index("Examples\n--------")]
    bullets: list[tuple[Mode, str, str]] = []
    mode = None
    for line in options.splitlines():
        heading = next((m for h, m in DOC_SECTION_MODES.items() if line.startswith(h)), None)
        if heading is not None:
            mode = heading
        elif line.startswith("- "):
            assert mode is not None, f"option bullet before any section: {line!r}"
            bullets.append((mode, line[2:].split(": ", 1)[0], line[2:]))
        elif line.startswith("  ") and bullets:
            section, head, text = bullets[-1]
            bullets[-1] = (section, head, text + " " + line.strip())
    return bullets


def test_the_data_source_docstring_lists_every_option_with_its_modes_and_default():
    listed = set()
    for section_mode, head, text in _doc_bullets():
        marks = re.findall(r"\((\w+)\)", head)
        for name in _names(head):
            spec = OPTIONS.get(name)
            assert spec is not None and spec.name == name, f"the docstring lists unknown option {name}"
            modes = DOC_MARKS[marks[0]] if marks else section_mode
            assert spec.modes == modes, f"the docstring says {name} applies to {modes}; the table says {spec.modes}"
            assert spec.default_text() in _plain(text), f"the docstring omits {name}'s default {spec.default_text()!r}"
            listed.add(name)
    expected = {spec.name for spec in OPTIONS}
    assert listed == expected, f"missing from the docstring: {sorted(expected - listed)}"


def test_the_data_source_docstring_examples_use_only_known_options():
    doc = inspect.getdoc(AeronArchiveDataSource) or ""
    used = set(re.findall(r'\.option\("([^"]+)"', doc[doc.index("Examples\n--------") :]))
    assert used and all(name in OPTIONS or name == "checkpointLocation" for name in used), sorted(used)
    assert {"maxBytesPerTrigger", "recordingId", "channel"} <= used
