"""Offline verification (and repair) of recordings against their segment files.

`verify_recording` walks every frame from the start position to the stop position (or, for a recording a crash
left active, to the last frame written) and reports problems by stream position: missing segment files, zero
length gaps before the stop position, frames whose header does not match their position (termOffset, termId,
streamId), frames running past their term, damaged PAD frames (shorter than a header, or with non-zero bytes after
the header: a DATA frame whose type was hit; a PAD may lie anywhere in its term, see `frames.pad_body_is_clear`),
record-checksum mismatches, segment files that end before the data they should hold, and torn frames: a frame
running past the end of its segment file (wherever it lies: segment files are created at their full length, so a
short one was cut) or, for a crashed recording, a page-straddling last frame with an all-zero page. With `fix=True`
the recording is cut back to the first problem, keeping exactly the good frames before it: the segment file holding
it is truncated there and re-extended to its full length (as truncate does), later segment files are deleted, and
the catalog stop position is updated. Nothing is written unless a fix is asked for and needed.

This is the tool the archive's startup error about a torn last fragment points at
(`aeron-archive verify --dir DIR --fix`). Run it only while no archive has the directory open.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from aeron_archive_spark.archive.constants import CATALOG_FILE_NAME, NULL_POSITION
from aeron_archive_spark.archive.descriptor import RecordingDescriptor
from aeron_archive_spark.archive.exceptions import ArchiveError
from aeron_archive_spark.archive.storage.catalog import (
    MIN_CAPACITY,
    Catalog,
    catalog_path,
    first_zero_page,
    fragment_straddles_page_boundary,
    is_valid_last_frame,
)
from aeron_archive_spark.archive.storage.checksums import Checksum, ChecksumMismatch, frame_checksum
from aeron_archive_spark.archive.storage.frames import (
    FRAME_ALIGNMENT,
    HDR_TYPE_DATA,
    HDR_TYPE_PAD,
    HEADER_LENGTH,
    HEADER_STRUCT,
    MAX_FRAME_LENGTH,
    MAX_MESSAGE_LENGTH,
    FrameScan,
    ScanStop,
    align,
    compute_term_id_from_position,
    frame_length_at,
    frame_type_at,
    pad_body_is_clear,
    position_bits_to_shift,
    scan_frames,
)
from aeron_archive_spark.archive.storage.segments import (
    erase_segment_tail,
    segment_file_base_position,
    segment_file_name,
    segment_files,
)

log = logging.getLogger(__name__)

_CHUNK_LENGTH = 1024 * 1024


class IssueKind(StrEnum):
    INVALID_POSITIONS = "invalid_positions"
    MISSING_SEGMENT = "missing_segment"
    ZERO_LENGTH_GAP = "zero_length_gap"
    HEADER_MISMATCH = "header_mismatch"
    FRAME_OVERRUN = "frame_overrun"
    CHECKSUM_MISMATCH = "checksum_mismatch"
    TORN_LAST_FRAME = "torn_last_frame"
    TRUNCATED_SEGMENT = "truncated_segment"
    INVALID_PADDING = "invalid_padding"


@dataclass(frozen=True, slots=True)
class VerifyIssue:
    position: int
    kind: IssueKind
    message: str


@dataclass(slots=True)
class VerifyResult:
    recording_id: int
    start_position: int
    stop_position: int  # the catalog's value when verified (-1: left active)
    end_position: int  # end of the verified, well-formed data
    frame_count: int = 0
    issues: list[VerifyIssue] = field(default_factory=list)
    fixed: bool = False
    new_stop_position: int | None = None
    truncated_file: str | None = None
    deleted_files: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.issues

    @property
    def first_issue_position(self) -> int | None:
        return min((i.position for i in self.issues), default=None)

    def summary(self) -> str:
        if self.ok:
            return f"(recordingId={self.recording_id}) OK: {self.frame_count} frames up to position {self.end_position}"
        lines = [f"(recordingId={self.recording_id}) ERR: {len(self.issues)} issue(s)"]
        lines += [f"  position={i.position} {i.kind.value}: {i.message}" for i in self.issues]
        if self.fixed:
            lines.append(f"  fixed: stopPosition={self.new_stop_position}")
        return "\n".join(lines)


def verify_recording(
    archive_dir: str | os.PathLike[str],
    descriptor: RecordingDescriptor,
    checksum: Checksum | None = None,
    *,
    fix: bool = False,
    catalog: Catalog | None = None,
    clock_ms: Callable[[], int] | None = None,
) -> VerifyResult:
    """Verify one recording; with `fix`, cut it back to its first problem and update `catalog` if given."""
    directory = os.fspath(archive_dir)
    start = descriptor.start_position
    stop = descriptor.stop_position
    result = VerifyResult(descriptor.recording_id, start, stop, start)

    if start < 0 or start & (FRAME_ALIGNMENT - 1):
        result.issues.append(VerifyIssue(start, IssueKind.INVALID_POSITIONS, f"invalid startPosition={start}"))
        return result
    if stop != NULL_POSITION and (stop < start or stop & (FRAME_ALIGNMENT - 1)):
        result.issues.append(
            VerifyIssue(start, IssueKind.INVALID_POSITIONS, f"invalid stopPosition={stop} for startPosition={start}")
        )
        return result

    _walk(directory, descriptor, checksum, result)
    if fix:
        _fix(directory, descriptor, result, catalog, clock_ms or _now_ms)
    level = logging.INFO if result.ok else logging.WARNING
    log.log(level, "%s", result.summary())
    return result


def verify_archive(
    archive_dir: str | os.PathLike[str], fix: bool = False, checksum: Checksum | None = None
) -> list[VerifyResult]:
    """Verify every VALID recording of the archive's catalog (opened without crash recovery).

    The catalog is read through a read-only mapping; only when `fix` is set and a recording needs fixing is it
    opened for writing, so verifying never creates, grows or touches a file it does not repair. A directory
    without a catalog is an error: verify must not turn a mistyped path into a new, empty archive.
    """
    directory = os.fspath(archive_dir)
    if not os.path.isdir(directory):
        raise ArchiveError(f"archive directory not found: {directory}")
    if not os.path.isfile(catalog_path(directory)):
        raise ArchiveError(f"no {CATALOG_FILE_NAME} in archive directory {directory}: nothing to verify")
    with Catalog(directory, writable=False) as catalog:
        descriptors = list(catalog.descriptors())
    results = [verify_recording(directory, d, checksum) for d in descriptors]
    pending = [(d, r) for d, r in zip(descriptors, results, strict=True) if _needs_fix(d, r)]
    if fix and pending:
        clock_ms = _now_ms
        with Catalog(directory, writable=True, capacity=MIN_CAPACITY, recover=False) as writable:
            for d, r in pending:
                _fix(directory, d, r, writable, clock_ms)
    return results


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _needs_fix(d: RecordingDescriptor, result: VerifyResult) -> bool:
    """Whether `_fix` would change anything: a problem to cut back to, or a crashed recording to close off."""
    if any(i.kind is IssueKind.INVALID_POSITIONS for i in result.issues):
        return False
    return bool(result.issues) or d.stop_position == NULL_POSITION


def _walk(directory: str, d: RecordingDescriptor, checksum: Checksum | None, result: VerifyResult) -> None:
    """Walk the frames from the start position; record the first structural problem and where the good data ends.

    Only bytes that are in the segment file count: a segment file is created at its full length, so one that ends
    before the data it should hold was cut, and a frame running past its end is torn wherever it lies (a zero
    frame length in a full-length file is simply the end of the data, as Java Aeron leaves it).
    """
    start, stop = d.start_position, d.stop_position
    active = stop == NULL_POSITION
    term_length = d.term_buffer_length
    segment_length = d.segment_file_length
    shift = position_bits_to_shift(term_length)
    segments = {s.base_position: s for s in segment_files(directory, d.recording_id)}

    buffer = bytearray(min(_CHUNK_LENGTH, term_length))
    position = start
    last_frame_position = NULL_POSITION
    last_frame_length = 0
    fd = -1
    fd_base = NULL_POSITION
    file_name = ""
    file_size = 0
    file_end = NULL_POSITION  # stream position just past the last byte the open segment file holds
    try:
        while active or position < stop:
            base = segment_file_base_position(start, position, term_length, segment_length)
            if base != fd_base:
                if fd >= 0:
                    os.close(fd)
                    fd = -1
                segment = segments.get(base)
                if segment is None:
                    if not active:
                        name = segment_file_name(d.recording_id, base)
                        result.issues.append(
                            VerifyIssue(position, IssueKind.MISSING_SEGMENT, f"segment file not found: {name}")
                        )
                    break
                fd = os.open(segment.path, os.O_RDONLY)
                fd_base = base
                file_name = segment.name
                file_size = os.fstat(fd).st_size
                file_end = base + min(file_size, segment_length)

            term_remaining = term_length - (position & (term_length - 1))
            want = min(len(buffer), term_remaining)
            if not active:
                want = min(want, stop - position)
            got = _read_fully(fd, memoryview(buffer)[:want], position - base)

            scan = scan_frames(buffer, 0, got, stop_at_padding=False)
            good = _check_headers(scan, position, shift, d, result)
            good = _check_padding(buffer, scan, good, position, d, result)
            if checksum is not None:
                _check_checksums(buffer, scan, good, checksum, position, result)
            if good:
                result.frame_count += good
                last_frame_position = position + int(scan.offsets[good - 1])
                last_frame_length = align(int(scan.lengths[good - 1]), FRAME_ALIGNMENT)
            if good < scan.count:
                position += int(scan.offsets[good])
                break
            position += scan.stop_offset

            if scan.stop_reason is ScanStop.END:
                if got == want:
                    continue
                # The file ends on a frame boundary: the end of the data, unless the catalog says there is more.
                if not active:
                    result.issues.append(
                        VerifyIssue(
                            position,
                            IssueKind.TRUNCATED_SEGMENT,
                            f"segment file {file_name} ends at position={file_end} ({file_size} bytes), before "
                            f"stopPosition={stop}, recordingId={d.recording_id}",
                        )
                    )
                break
            present = got - scan.stop_offset
            if scan.stop_reason is ScanStop.ZERO_LENGTH or (
                scan.stop_frame_length <= 0 and not any(buffer[scan.stop_offset : got])
            ):
                if not active:
                    result.issues.append(
                        VerifyIssue(
                            position, IssueKind.ZERO_LENGTH_GAP, f"zero length frame before stopPosition={stop}"
                        )
                    )
                break
            # INCOMPLETE: the frame at `position` does not fit in what was read.
            frame_length = scan.stop_frame_length
            if frame_length <= 0:  # fewer than 4 bytes of it are left before the end of the file
                result.issues.append(
                    VerifyIssue(
                        position,
                        IssueKind.TORN_LAST_FRAME,
                        f"frame at position={position} is cut by the end of segment file {file_name} "
                        f"({file_size} bytes): only {present} bytes of its header are present, "
                        f"recordingId={d.recording_id}",
                    )
                )
                break
            aligned = align(frame_length, FRAME_ALIGNMENT)
            is_pad = present >= HEADER_LENGTH and frame_type_at(buffer, scan.stop_offset) == HDR_TYPE_PAD
            if aligned > term_remaining - scan.stop_offset:
                result.issues.append(
                    VerifyIssue(
                        position,
                        IssueKind.FRAME_OVERRUN,
                        f"frame of {frame_length} bytes runs past the end of its term in segment {fd_base}",
                    )
                )
                break
            if not active and position + aligned > stop:
                result.issues.append(
                    VerifyIssue(
                        position,
                        IssueKind.FRAME_OVERRUN,
                        f"frame of {frame_length} bytes runs past stopPosition={stop}",
                    )
                )
                break
            if not is_pad and aligned > MAX_MESSAGE_LENGTH:
                result.issues.append(
                    VerifyIssue(position, IssueKind.FRAME_OVERRUN, f"implausible frame length {frame_length}")
                )
                break
            if position + aligned > file_end or got < want:
                available = present if got < want else max(file_end - position, 0)
                result.issues.append(
                    VerifyIssue(
                        position,
                        IssueKind.TORN_LAST_FRAME,
                        f"frame at position={position} with frameLength={frame_length} runs past the end of "
                        f"segment file {file_name} ({file_size} bytes, ending at position={file_end}): only "
                        f"{available} of its {aligned} bytes are present, recordingId={d.recording_id}",
                    )
                )
                break
            if is_pad:
                # A PAD longer than what is left of the chunk: check its header and body, then skip it.
                if not _check_header_at(buffer, scan.stop_offset, position, shift, d, result):
                    break
                if not _pad_is_clean(fd, position - fd_base, position, frame_length, d, result):
                    break
                result.frame_count += 1
                last_frame_position, last_frame_length = position, aligned
                position += aligned
            elif aligned > len(buffer):
                buffer = bytearray(aligned)  # a DATA frame bigger than the chunk: read it whole next time round
    finally:
        if fd >= 0:
            os.close(fd)

    result.end_position = position
    if active and not result.issues and last_frame_length > 0:
        _check_torn_last_frame(directory, d, checksum, last_frame_position, last_frame_length, result)


def _read_fully(fd: int, view: memoryview, offset: int) -> int:
    """Read until `view` is full or the file ends; returns the byte count (what is not read is not data)."""
    done = 0
    while done < len(view):
        n = os.preadv(fd, [view[done:]], offset + done)
        if n <= 0:
            break
        done += n
    return done


def _check_padding(
    buffer: bytearray, scan: FrameScan, good: int, position: int, d: RecordingDescriptor, result: VerifyResult
) -> int:
    """Number of leading frames among the first `good` before a damaged PAD frame; records an issue for it.

    A PAD is a frame like any other, wherever it lies in its term: its length says where the next frame starts.
    What a recorder never writes is a PAD shorter than its header, or one with bytes after its header (only the
    header is written, into a file that reads as zeros elsewhere): that is a DATA frame whose type field was hit,
    and replaying it as padding would drop that message silently.
    """
    for offset, length, frame_type in scan.other_frames(good):
        if (
            frame_type == HDR_TYPE_PAD
            and length >= HEADER_LENGTH
            and pad_body_is_clear(buffer, offset, length, scan.end)
        ):
            continue
        frame_position = position + offset
        result.issues.append(
            VerifyIssue(
                frame_position, IssueKind.INVALID_PADDING, _bad_frame_message(frame_position, length, frame_type, d)
            )
        )
        return int(scan.count_starting_before(offset - scan.start))
    return good


def _pad_is_clean(
    fd: int, file_offset: int, position: int, frame_length: int, d: RecordingDescriptor, result: VerifyResult
) -> bool:
    """`_check_padding` for one PAD longer than the chunk in hand: its body is read from the file (as much of it
    as can hold a payload)."""
    aligned = align(frame_length, FRAME_ALIGNMENT)
    body = bytearray(min(aligned, MAX_FRAME_LENGTH))
    got = _read_fully(fd, memoryview(body), file_offset)
    if frame_length >= HEADER_LENGTH and pad_body_is_clear(body, 0, frame_length, got):
        return True
    result.issues.append(
        VerifyIssue(position, IssueKind.INVALID_PADDING, _bad_frame_message(position, frame_length, HDR_TYPE_PAD, d))
    )
    return False


def _bad_frame_message(position: int, length: int, frame_type: int, d: RecordingDescriptor) -> str:
    if frame_type != HDR_TYPE_PAD:
        return f"frame of unknown type={frame_type} at position={position}, recordingId={d.recording_id}"
    if length < HEADER_LENGTH:
        return (
            f"PAD frame at position={position} of length={length} is shorter than a frame header, "
            f"recordingId={d.recording_id}"
        )
    return (
        f"PAD frame at position={position} of length={length} holds non-zero bytes after its header (a DATA "
        f"frame turned into padding?), recordingId={d.recording_id}"
    )


def _check_headers(scan: FrameScan, position: int, shift: int, d: RecordingDescriptor, result: VerifyResult) -> int:
    """Number of leading frames whose termOffset/termId/streamId match their position; records the first that
    does not (the data after it cannot be trusted, so the walk ends there)."""
    if scan.count == 0:
        return 0
    expected_offsets = (position & (d.term_buffer_length - 1)) + scan.offsets
    expected_term_id = compute_term_id_from_position(position, shift, d.initial_term_id)
    term_offsets = scan.term_offsets()
    term_ids = scan.term_ids()
    stream_ids = scan.stream_ids()
    bad = (term_offsets != expected_offsets) | (term_ids != expected_term_id) | (stream_ids != d.stream_id)
    if not bad.any():
        return scan.count
    i = int(np.argmax(bad))
    result.issues.append(
        _header_issue(
            position + int(scan.offsets[i]),
            int(term_offsets[i]),
            int(expected_offsets[i]),
            int(term_ids[i]),
            expected_term_id,
            int(stream_ids[i]),
            d.stream_id,
        )
    )
    return i


def _check_header_at(
    buffer: bytearray, offset: int, position: int, shift: int, d: RecordingDescriptor, result: VerifyResult
) -> bool:
    expected_offset = position & (d.term_buffer_length - 1)
    expected_term_id = compute_term_id_from_position(position, shift, d.initial_term_id)
    _, _, _, _, term_offset, _, stream_id, term_id, _ = HEADER_STRUCT.unpack_from(buffer, offset)
    if term_offset == expected_offset and term_id == expected_term_id and stream_id == d.stream_id:
        return True
    result.issues.append(
        _header_issue(position, term_offset, expected_offset, term_id, expected_term_id, stream_id, d.stream_id)
    )
    return False


def _header_issue(
    position: int,
    term_offset: int,
    expected_offset: int,
    term_id: int,
    expected_term_id: int,
    stream_id: int,
    expected_stream_id: int,
) -> VerifyIssue:
    return VerifyIssue(
        position,
        IssueKind.HEADER_MISMATCH,
        f"fragment termOffset={term_offset} (expected={expected_offset}), termId={term_id} "
        f"(expected={expected_term_id}), streamId={stream_id} (expected={expected_stream_id})",
    )


def _check_checksums(
    buffer: bytearray, scan: FrameScan, good: int, checksum: Checksum, position: int, result: VerifyResult
) -> None:
    """Record every DATA frame among the first `good` whose stored checksum is wrong (the walk carries on: the
    frame structure is intact, only payload bytes differ)."""
    rows = zip(
        scan.offsets[:good].tolist(),
        scan.lengths[:good].tolist(),
        scan.types[:good].tolist(),
        scan.session_ids()[:good].tolist(),
        strict=True,
    )
    for offset, length, frame_type, stored in rows:
        if frame_type != HDR_TYPE_DATA:
            continue
        computed = frame_checksum(checksum, buffer, offset, length)
        if computed != stored:
            mismatch = ChecksumMismatch(position + offset, offset, stored, computed)
            result.issues.append(VerifyIssue(mismatch.position, IssueKind.CHECKSUM_MISMATCH, mismatch.message))


def _check_torn_last_frame(
    directory: str,
    d: RecordingDescriptor,
    checksum: Checksum | None,
    frame_position: int,
    frame_length: int,
    result: VerifyResult,
) -> None:
    """Crash recovery's test of a page-straddling last frame in a full-length file (`Catalog.isValidFragment`)."""
    base = segment_file_base_position(d.start_position, frame_position, d.term_buffer_length, d.segment_file_length)
    file_offset = frame_position - base
    if not fragment_straddles_page_boundary(file_offset, frame_length):
        return
    name = segment_file_name(d.recording_id, base)
    fd = os.open(os.path.join(directory, name), os.O_RDONLY)
    try:
        header = os.pread(fd, HEADER_LENGTH, file_offset)
        if frame_type_at(header, 0) == HDR_TYPE_PAD:
            return  # only a PAD's header is ever written: nothing more to check
        frame = bytearray(frame_length)
        got = _read_fully(fd, memoryview(frame), file_offset)
    finally:
        os.close(fd)
    if got == frame_length and is_valid_last_frame(frame, file_offset, checksum):
        return
    zero_page = first_zero_page(frame[:got], file_offset)
    if zero_page >= 0:
        present, found = zero_page, f"the page at position={frame_position + zero_page} is all zeros"
    else:
        present, found = got, "the segment file ends inside it"
    result.issues.append(
        VerifyIssue(
            frame_position,
            IssueKind.TORN_LAST_FRAME,
            f"last frame at position={frame_position} with frameLength={frame_length_at(header, 0)} straddles a "
            f"page boundary and looks incompletely written: {found}, so at most {present} of its {frame_length} "
            f"bytes are present (segment file {name}, offset {file_offset}), recordingId={d.recording_id}",
        )
    )


def _fix(
    directory: str,
    d: RecordingDescriptor,
    result: VerifyResult,
    catalog: Catalog | None,
    clock_ms: Callable[[], int],
) -> None:
    if not _needs_fix(d, result):
        return
    active = d.stop_position == NULL_POSITION
    cut = result.first_issue_position
    if cut is None:
        if not active:
            return
        new_stop = max(result.end_position, d.start_position)  # close off a crashed recording, as recovery does
    else:
        new_stop = max(cut, d.start_position)
        _cut_segments(directory, d, new_stop, result)

    if catalog is not None:
        if active:
            catalog.recording_stopped(d.recording_id, new_stop, clock_ms())
        elif new_stop != d.stop_position:
            catalog.update_stop_position(d.recording_id, new_stop)
    result.fixed = True
    result.new_stop_position = new_stop
    log.warning("recording %d fixed: stopPosition %d -> %d", d.recording_id, d.stop_position, new_stop)


def _cut_segments(directory: str, d: RecordingDescriptor, position: int, result: VerifyResult) -> None:
    term_length, segment_length = d.term_buffer_length, d.segment_file_length
    base = segment_file_base_position(d.start_position, position, term_length, segment_length)
    offset = position - base
    for segment in segment_files(directory, d.recording_id):
        if segment.base_position > base or (segment.base_position == base and offset == 0):
            os.remove(segment.path)
            result.deleted_files.append(segment.name)
        elif segment.base_position == base:
            erase_segment_tail(segment.path, offset, segment_length)
            result.truncated_file = segment.name
    if result.deleted_files:
        log.warning("recording %d: deleted segment files %s", d.recording_id, ", ".join(result.deleted_files))
