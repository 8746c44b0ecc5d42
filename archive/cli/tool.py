"""Aeron `ArchiveTool`'s operator verbs, offline on an archive directory: capacity, count-entries, describe-all,
mark-valid, mark-invalid, checksum, compact, delete-orphaned-segments, migrate.

Each verb does what ArchiveTool's verb of the same name does (Java 1.53) through `archive.storage.maintenance` and
`archive.storage.migration`, and prints Java's wording where Java prints something, or JSON with `--json`. The
directory is named with `--dir`, as for every other verb of `aeron-archive`. Verbs that delete (compact,
delete-orphaned-segments) or rewrite names (migrate) ask before they act, as Java does; `--yes` answers for a
script, and without a terminal they refuse rather than wait. Verbs that write refuse while an archive has the
catalog open for writing (Java's tool does not look; its archive would overwrite or contradict the change).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from aeron_archive_spark.archive.constants import RecordingState
from aeron_archive_spark.archive.exceptions import ArchiveError

log = logging.getLogger(__name__)

type _Sub = argparse._SubParsersAction[argparse.ArgumentParser]


def add_subparser(sub: _Sub) -> None:
    """Register the verbs on `aeron-archive`'s subcommands."""
    capacity = _verb(sub, "capacity", "the catalog's capacity in bytes; with BYTES, grow it to that (offline)")
    capacity.add_argument("bytes", nargs="?", type=_byte_size, help="new capacity, e.g. 4m (smaller: no change)")
    capacity.set_defaults(func=_capacity)

    count = _verb(sub, "count-entries", "how many VALID recordings the catalog holds (offline)")
    count.set_defaults(func=_count_entries)

    describe_all = _verb(sub, "describe-all", "every catalog entry whatever its state, as ArchiveTool prints them")
    describe_all.set_defaults(func=_describe_all)

    for name, state in (("mark-valid", RecordingState.VALID), ("mark-invalid", RecordingState.INVALID)):
        mark = _verb(sub, name, f"set a recording's catalog entry to {state.name} (offline)", json_output=False)
        mark.add_argument("recording_id", type=_recording_id)
        mark.set_defaults(func=_mark, state=state)

    checksum = _verb(sub, "checksum", "compute record checksums into the frames and the catalog (offline)")
    checksum.add_argument("algorithm", help="CRC-32 or CRC-32C (or Java's class name, io.aeron.archive.checksum.Crc32)")
    checksum.add_argument("recording_id", nargs="?", type=_recording_id, help="only this VALID recording")
    checksum.add_argument(
        "-a", "--all-files", action="store_true", help="every segment file, not only each recording's last"
    )
    checksum.set_defaults(func=_checksum)

    compact = _verb(sub, "compact", "drop non-VALID catalog entries and delete their files (offline, asks first)")
    _confirm_options(compact)
    compact.set_defaults(func=_compact)

    orphans = _verb(
        sub,
        "delete-orphaned-segments",
        "delete segment files outside their recording's start..stop segments (offline, asks first)",
    )
    orphans.add_argument("recording_id", nargs="?", type=_recording_id, help="only this recording's files")
    _confirm_options(orphans)
    orphans.set_defaults(func=_delete_orphaned_segments)

    migrate = _verb(sub, "migrate", "migrate a directory of an older Aeron to the current catalog (offline, asks)")
    _confirm_options(migrate, dry_run=False)
    migrate.set_defaults(func=_migrate)


def _verb(sub: _Sub, name: str, help_text: str, json_output: bool = True) -> argparse.ArgumentParser:
    parser = sub.add_parser(name, help=help_text, description=help_text)
    parser.add_argument("--dir", required=True, help="archive directory (catalog and segment files)")
    if json_output:
        parser.add_argument("--json", action="store_true", help="print the result as JSON")
    return parser


def _confirm_options(parser: argparse.ArgumentParser, dry_run: bool = True) -> None:
    parser.add_argument("--yes", action="store_true", help="do it without asking (for scripts)")
    if dry_run:
        parser.add_argument("--dry-run", action="store_true", help="list what would be deleted, change nothing")


def _recording_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a recording id: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"not a recording id: {text!r} (ids are >= 0)")
    return value


def _byte_size(text: str) -> int:
    from aeron_archive_spark.archive.tables.option_table import parse_bytes

    try:
        return parse_bytes("BYTES", text)
    except ValueError as ex:
        raise argparse.ArgumentTypeError(str(ex)) from None


# -- guards -----------------------------------------------------------------------------------------------------------


def _offline(directory: str, verb: str) -> str:
    """The directory, checked to hold a catalog no running archive writes; `verb` names the refusal."""
    from aeron_archive_spark.archive.storage import maintenance

    directory = maintenance.require_archive(directory)
    running = _running_archive(directory)
    if running is not None:
        raise ArchiveError(f"archive directory {directory} is in use ({running}): stop the archive before `{verb}`")
    return directory


def _running_archive(directory: str) -> str | None:
    """What shows an archive running on the directory, or None: its mark file's holder judged live (as a starting
    archive judges it: Java's activity rule, which also sees an archive on another host sharing the directory), or a
    process on this host with the catalog mapped for writing."""
    from aeron_archive_spark.archive.storage import maintenance
    from aeron_archive_spark.archive.storage.mark_file import holder_liveness

    found = []
    liveness = holder_liveness(directory)
    if liveness is not None and liveness.live:
        found.append(f"its mark file shows an archive: {liveness.reason}")
    found.extend(
        f"pid {w.pid} has the catalog mapped for writing: {w.command or '?'}"
        for w in maintenance.catalog_writers(directory)
    )
    return "; ".join(found) or None


def _confirmed(args: argparse.Namespace, warning: str) -> bool:
    """Java's question before a destructive verb: --yes answers it; a terminal is asked (y/yes goes on); without
    either the verb refuses, so that a script never hangs on, nor silently skips, a deletion."""
    if args.yes:
        return True
    if not sys.stdin.isatty():
        raise ValueError(f"{warning} Not confirmed: pass --yes to go on (stdin is not a terminal)")
    print(warning)
    answer = input("Continue? (y/n): ").strip().lower()
    return answer in ("y", "yes")


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2))


# -- verbs ------------------------------------------------------------------------------------------------------------


def _capacity(args: argparse.Namespace) -> int:
    from aeron_archive_spark.archive.storage import maintenance

    before = maintenance.catalog_capacity(args.dir)
    after = before
    if args.bytes is not None:
        after = maintenance.grow_catalog(_offline(args.dir, "capacity"), args.bytes)
    if args.json:
        _print_json({"capacity": after, "previousCapacity": before})
    elif after != before:
        print(f"Catalog capacity in bytes: {after} (was {before})")
    else:
        print(f"Catalog capacity in bytes: {after}")
    return 0


def _count_entries(args: argparse.Namespace) -> int:
    from aeron_archive_spark.archive.storage import maintenance

    count = maintenance.count_entries(args.dir)
    if args.json:
        _print_json({"entries": count})
    else:
        print(count)
    return 0


def _describe_all(args: argparse.Namespace) -> int:
    from aeron_archive_spark.archive.storage import maintenance
    from aeron_archive_spark.archive.storage.mark_file import MarkFileError, read_mark_file

    capacity, entries = maintenance.catalog_entries(args.dir)
    try:
        contents = read_mark_file(args.dir, wait_s=5.0)  # ArchiveTool waits as long for one being created
    except MarkFileError:
        contents = None  # Java's tool fails without one; ours describes the catalog, which is what there is
    mark = None if contents is None else contents.header
    if args.json:
        _print_json(
            {
                "markFile": None if mark is None else mark.to_json_dict(),
                "catalogCapacity": capacity,
                "entries": [{"state": _state_name(e.state), **e.descriptor.to_json_dict()} for e in entries],
            }
        )
        return 0
    if contents is not None and mark is not None:
        # ArchiveTool: Agrona's line on opening the file, then printMarkInformation: now, start, activity (local
        # time), the header
        print(f"INFO: mark file exists: {contents.path}")
        print(
            f"{_clock(time.time())} (start: {_date_time(mark.start_timestamp)}, "
            f"activity: {_date_time(mark.activity_timestamp)})"
        )
        print(mark.java_string())
    print(f"Catalog capacity in bytes: {capacity}")
    for entry in entries:
        print(f"{java_descriptor_string(entry.descriptor.to_json_dict())}|{_state_name(entry.state)}")
    return 0


def _clock(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s).strftime("%H:%M:%S")


def _date_time(epoch_ms: int) -> str:
    """As Java's `%tF %tH:%tM:%tS` of `new Date(ms)` (local time); -1 (closed) is 1970's last millisecond."""
    return datetime.fromtimestamp(epoch_ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


def java_descriptor_string(fields: dict[str, Any]) -> str:
    """A descriptor as Java's generated `RecordingDescriptorDecoder.toString()` writes it (`ArchiveTool describe`):
    `[RecordingDescriptor](sbeTemplateId=22|...):controlSessionId=0|...|strippedChannel='...'|...`."""
    from aeron_archive_spark.archive.codecs.templates import SCHEMA_ID, SCHEMA_VERSION
    from aeron_archive_spark.archive.descriptor import DESCRIPTOR_BLOCK_LENGTH

    head = (
        f"[RecordingDescriptor](sbeTemplateId={_RECORDING_DESCRIPTOR_TEMPLATE_ID}|sbeSchemaId={SCHEMA_ID}|"
        f"sbeSchemaVersion={SCHEMA_VERSION}|sbeBlockLength={DESCRIPTOR_BLOCK_LENGTH}):"
    )
    return head + "|".join(f"{k}='{v}'" if isinstance(v, str) else f"{k}={v}" for k, v in fields.items())


_RECORDING_DESCRIPTOR_TEMPLATE_ID = 22


def _state_name(state: int) -> str:
    try:
        return RecordingState(state).name
    except ValueError:
        return "SBE_UNKNOWN"


def _mark(args: argparse.Namespace) -> int:
    from aeron_archive_spark.archive.storage import maintenance

    directory = _offline(args.dir, f"mark-{args.state.name.lower()}")
    change = maintenance.mark_recording(directory, args.recording_id, args.state)
    if change.changed:
        print(f"(recordingId={change.recording_id}) changed state to {change.new_state.name}")
    else:
        print(f"(recordingId={change.recording_id}) is already {change.new_state.name}")
    return 0


def _checksum(args: argparse.Namespace) -> int:
    from aeron_archive_spark.archive.storage import maintenance
    from aeron_archive_spark.archive.storage.checksums import checksum_for_name

    checksum = checksum_for_name(args.algorithm)
    directory = _offline(args.dir, "checksum")
    stamps = maintenance.stamp_checksums(directory, checksum, args.recording_id, args.all_files)
    errors = [error for stamp in stamps for error in stamp.errors]
    if args.json:
        _print_json(
            [{"recordingId": s.recording_id, "files": s.files, "frames": s.frames, "errors": s.errors} for s in stamps]
        )
    else:
        for stamp in stamps:
            print(
                f"(recordingId={stamp.recording_id}) {stamp.frames} frame checksums written in "
                f"{len(stamp.files)} file(s) ({args.algorithm})"
            )
        for error in errors:
            print(error)
    return 1 if errors else 0


def _compact(args: argparse.Namespace) -> int:
    from aeron_archive_spark.archive.storage import maintenance

    directory = _offline(args.dir, "compact")
    plan = maintenance.plan_compaction(directory)
    if args.dry_run:
        return _report_compaction(args, plan, done=False)
    if plan.removed and not _confirmed(
        args,
        f"WARNING: Compacting the Catalog is non-recoverable operation! {len(plan.removed)} non-VALID recording(s) "
        f"will be deleted along with their {len(plan.files)} segment file(s).",
    ):
        print("compact: not confirmed, nothing changed")
        return 1
    return _report_compaction(args, maintenance.compact_catalog(directory), done=True)


def _report_compaction(args: argparse.Namespace, result: Any, done: bool) -> int:
    if args.json:
        _print_json(
            {
                "deletedRecords": [{"recordingId": rid, "state": state.name} for rid, state in result.removed],
                "reclaimedBytes": result.reclaimed_bytes,
                "deletedFiles": list(result.files),
                "dryRun": not done,
            }
        )
        return 0
    verb = "deleted" if done else "would delete"
    print(f"Compaction result: {verb} {len(result.removed)} records and reclaimed {result.reclaimed_bytes} bytes")
    for name in result.files:
        print(f"  {verb} {name}")
    return 0


def _delete_orphaned_segments(args: argparse.Namespace) -> int:
    from aeron_archive_spark.archive.storage import maintenance

    directory = _offline(args.dir, "delete-orphaned-segments")
    orphans = maintenance.find_orphaned_segments(directory, args.recording_id)
    owner = "" if args.recording_id is None else f" owned by the RecordingId[{args.recording_id}]"
    if orphans and not args.dry_run:
        if not _confirmed(args, f"WARNING: All {len(orphans)} orphaned segment files{owner} will be deleted."):
            print("delete-orphaned-segments: not confirmed, nothing changed")
            return 1
        orphans = maintenance.delete_orphaned_segments(directory, args.recording_id)
    if args.json:
        _print_json(
            {
                "orphanedSegments": [
                    {"name": o.name, "recordingId": o.recording_id, "reason": o.reason} for o in orphans
                ],
                "dryRun": args.dry_run,
            }
        )
        return 0
    verb = "would delete" if args.dry_run else "deleted"
    for orphan in orphans:
        print(f"(recordingId={orphan.recording_id}) {verb} {orphan.name}: {orphan.reason}")
    print(f"{len(orphans)} orphaned segment file(s) {'found (dry run)' if args.dry_run else 'deleted'}")
    return 0


def _migrate(args: argparse.Namespace) -> int:
    from aeron_archive_spark.archive.storage import migration
    from aeron_archive_spark.archive.storage.catalog import CATALOG_VERSION

    directory = _offline(args.dir, "migrate")
    version = migration.catalog_version(directory)
    steps = migration.plan_migration(version)
    out: Callable[[str], None] = print if not args.json else (lambda _line: None)
    out(f"Catalog version={migration.full_version_string(version)}")
    out(f"Latest version={migration.full_version_string(CATALOG_VERSION)}")
    if steps and not _confirmed(
        args,
        "WARNING: please ensure archive is not running and that a backup has been taken of the archive directory "
        "before attempting migration(s).",
    ):
        print("migrate: not confirmed, nothing changed")
        return 1
    result = migration.migrate_archive(directory)
    if args.json:
        _print_json(
            {
                "catalogVersion": result.catalog_version,
                "steps": [
                    {
                        "fromVersion": s.from_version,
                        "toVersion": s.to_version,
                        "renames": [
                            {"recordingId": r.recording_id, "from": r.old_name, "to": r.new_name} for r in s.renames
                        ],
                        "catalogRewritten": s.catalog_rewritten,
                    }
                    for s in result.steps
                ],
            }
        )
        return 0
    if not result.steps:
        print("Nothing to migrate")
    for step in result.steps:
        print(f"Migration step to {migration.full_version_string(step.to_version)}")
        for rename in step.renames:
            print(f"(recordingId={rename.recording_id}) renaming {rename.old_name} -> {rename.new_name}")
        for recording_id, reason in step.skipped:
            print(f"(recordingId={recording_id}) skipped: {reason}")
        if step.catalog_rewritten:
            print("catalog rewritten in the aligned entry layout")
    return 0
