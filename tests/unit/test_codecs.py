"""Byte-level tests of archive.codecs against layouts transcribed by hand from the facts sheet (§3.1, §4.1-4.4).

The EXPECTED table below is an independent transcription of the facts sheet, not derived from the XML, so a
wrong offset, block length, var-field order or sinceVersion in the schema shows up as a failing test.
"""

from __future__ import annotations

import random
import struct
from typing import Any

import numpy as np
import pytest

from aeron_archive_spark.archive import constants
from aeron_archive_spark.archive.codecs import CODEC, CodecError, Message, SbeCodec, SchemaError, load_archive_codec, templates

I8 = "q"
I4 = "i"
I1 = "b"
INT32_NULL = -(1 << 31)
INT64_NULL = -(1 << 63)

# name: (template id, block length, [(camelName, struct code, offset, sinceVersion)], [(var name, kind, since)])
# kind "a" = varAscii (str), "d" = varData (bytes).
_CS = ("controlSessionId", I8, 0, 0)
_CO = ("correlationId", I8, 8, 0)


def _f(name: str, code: str, offset: int, since: int = 0) -> tuple[str, str, int, int]:
    return (name, code, offset, since)


EXPECTED: dict[str, tuple[int, int, list[tuple[str, str, int, int]], list[tuple[str, str, int]]]] = {
    "ControlResponse": (1, 32, [_CS, _CO, _f("relevantId", I8, 16), _f("code", I4, 24), _f("version", I4, 28, 4)],
                        [("errorMessage", "a", 0)]),
    "ConnectRequest": (2, 16, [_f("correlationId", I8, 0), _f("responseStreamId", I4, 8), _f("version", I4, 12)],
                       [("responseChannel", "a", 0)]),
    "CloseSessionRequest": (3, 8, [_CS], []),
    "StartRecordingRequest": (4, 24, [_CS, _CO, _f("streamId", I4, 16), _f("sourceLocation", I4, 20)],
                              [("channel", "a", 0)]),
    "StopRecordingRequest": (5, 20, [_CS, _CO, _f("streamId", I4, 16)], [("channel", "a", 0)]),
    "ReplayRequest": (6, 56, [_CS, _CO, _f("recordingId", I8, 16), _f("position", I8, 24), _f("length", I8, 32),
                              _f("replayStreamId", I4, 40), _f("fileIoMaxLength", I4, 44, 7),
                              _f("replayToken", I8, 48, 10)], [("replayChannel", "a", 0)]),
    "StopReplayRequest": (7, 24, [_CS, _CO, _f("replaySessionId", I8, 16)], []),
    "ListRecordingsRequest": (8, 28, [_CS, _CO, _f("fromRecordingId", I8, 16), _f("recordCount", I4, 24)], []),
    "ListRecordingsForUriRequest": (9, 32, [_CS, _CO, _f("fromRecordingId", I8, 16), _f("recordCount", I4, 24),
                                            _f("streamId", I4, 28)], [("channel", "a", 0)]),
    "ListRecordingRequest": (10, 24, [_CS, _CO, _f("recordingId", I8, 16)], []),
    "ExtendRecordingRequest": (11, 32, [_CS, _CO, _f("recordingId", I8, 16), _f("streamId", I4, 24),
                                        _f("sourceLocation", I4, 28)], [("channel", "a", 0)]),
    "RecordingPositionRequest": (12, 24, [_CS, _CO, _f("recordingId", I8, 16)], []),
    "TruncateRecordingRequest": (13, 32, [_CS, _CO, _f("recordingId", I8, 16), _f("position", I8, 24)], []),
    "StopRecordingSubscriptionRequest": (14, 24, [_CS, _CO, _f("subscriptionId", I8, 16)], []),
    "StopPositionRequest": (15, 24, [_CS, _CO, _f("recordingId", I8, 16)], []),
    "FindLastMatchingRecordingRequest": (16, 32, [_CS, _CO, _f("minRecordingId", I8, 16), _f("sessionId", I4, 24),
                                                  _f("streamId", I4, 28)], [("channel", "a", 0)]),
    "ListRecordingSubscriptionsRequest": (17, 32, [_CS, _CO, _f("pseudoIndex", I4, 16),
                                                   _f("subscriptionCount", I4, 20), _f("applyStreamId", I4, 24),
                                                   _f("streamId", I4, 28)], [("channel", "a", 0)]),
    "BoundedReplayRequest": (18, 60, [_CS, _CO, _f("recordingId", I8, 16), _f("position", I8, 24),
                                      _f("length", I8, 32), _f("limitCounterId", I4, 40),
                                      _f("replayStreamId", I4, 44), _f("fileIoMaxLength", I4, 48, 7),
                                      _f("replayToken", I8, 52, 10)], [("replayChannel", "a", 0)]),
    "StopAllReplaysRequest": (19, 24, [_CS, _CO, _f("recordingId", I8, 16)], []),
    "CatalogHeader": (20, 32, [_f("version", I4, 0), _f("length", I4, 4), _f("nextRecordingId", I8, 8),
                               _f("alignment", I4, 16), _f("reserved", I1, 31)], []),
    "RecordingDescriptorHeader": (21, 32, [_f("length", I4, 0), _f("state", I4, 4), _f("checksum", I4, 8),
                                           _f("reserved", I1, 31)], []),
    "RecordingDescriptor": (22, 80, [_CS, _CO, _f("recordingId", I8, 16), _f("startTimestamp", I8, 24),
                                     _f("stopTimestamp", I8, 32), _f("startPosition", I8, 40),
                                     _f("stopPosition", I8, 48), _f("initialTermId", I4, 56),
                                     _f("segmentFileLength", I4, 60), _f("termBufferLength", I4, 64),
                                     _f("mtuLength", I4, 68), _f("sessionId", I4, 72), _f("streamId", I4, 76)],
                            [("strippedChannel", "a", 0), ("originalChannel", "a", 0), ("sourceIdentity", "a", 0)]),
    "RecordingSubscriptionDescriptor": (23, 28, [_CS, _CO, _f("subscriptionId", I8, 16), _f("streamId", I4, 24)],
                                        [("strippedChannel", "a", 0)]),
    "RecordingSignalEvent": (24, 44, [_CS, _CO, _f("recordingId", I8, 16), _f("subscriptionId", I8, 24),
                                      _f("position", I8, 32), _f("signal", I4, 40)], []),
    "ReplicateRequest": (50, 36, [_CS, _CO, _f("srcRecordingId", I8, 16), _f("dstRecordingId", I8, 24),
                                  _f("srcControlStreamId", I4, 32)],
                         [("srcControlChannel", "a", 0), ("liveDestination", "a", 0)]),
    "StopReplicationRequest": (51, 24, [_CS, _CO, _f("replicationId", I8, 16)], []),
    "StartPositionRequest": (52, 24, [_CS, _CO, _f("recordingId", I8, 16)], []),
    "DetachSegmentsRequest": (53, 32, [_CS, _CO, _f("recordingId", I8, 16), _f("newStartPosition", I8, 24)], []),
    "DeleteDetachedSegmentsRequest": (54, 24, [_CS, _CO, _f("recordingId", I8, 16)], []),
    "PurgeSegmentsRequest": (55, 32, [_CS, _CO, _f("recordingId", I8, 16), _f("newStartPosition", I8, 24)], []),
    "AttachSegmentsRequest": (56, 24, [_CS, _CO, _f("recordingId", I8, 16)], []),
    "MigrateSegmentsRequest": (57, 32, [_CS, _CO, _f("srcRecordingId", I8, 16), _f("dstRecordingId", I8, 24)], []),
    "AuthConnectRequest": (58, 16, [_f("correlationId", I8, 0), _f("responseStreamId", I4, 8),
                                    _f("version", I4, 12)],
                           [("responseChannel", "a", 0), ("encodedCredentials", "d", 0), ("clientInfo", "a", 12)]),
    "Challenge": (59, 20, [_CS, _CO, _f("version", I4, 16)], [("encodedChallenge", "d", 0)]),
    "ChallengeResponse": (60, 16, [_CS, _CO], [("encodedCredentials", "d", 0)]),
    "KeepAliveRequest": (61, 16, [_CS, _CO], []),
    "TaggedReplicateRequest": (62, 52, [_CS, _CO, _f("srcRecordingId", I8, 16), _f("dstRecordingId", I8, 24),
                                        _f("channelTagId", I8, 32), _f("subscriptionTagId", I8, 40),
                                        _f("srcControlStreamId", I4, 48)],
                               [("srcControlChannel", "a", 0), ("liveDestination", "a", 0)]),
    "StartRecordingRequest2": (63, 28, [_CS, _CO, _f("streamId", I4, 16), _f("sourceLocation", I4, 20),
                                        _f("autoStop", I4, 24)], [("channel", "a", 0)]),
    "ExtendRecordingRequest2": (64, 36, [_CS, _CO, _f("recordingId", I8, 16), _f("streamId", I4, 24),
                                         _f("sourceLocation", I4, 28), _f("autoStop", I4, 32)],
                                [("channel", "a", 0)]),
    "StopRecordingByIdentityRequest": (65, 24, [_CS, _CO, _f("recordingId", I8, 16)], []),
    "ReplicateRequest2": (66, 68, [_CS, _CO, _f("srcRecordingId", I8, 16), _f("dstRecordingId", I8, 24),
                                   _f("stopPosition", I8, 32), _f("channelTagId", I8, 40),
                                   _f("subscriptionTagId", I8, 48), _f("srcControlStreamId", I4, 56),
                                   _f("fileIoMaxLength", I4, 60, 7), _f("replicationSessionId", I4, 64, 8)],
                          [("srcControlChannel", "a", 0), ("liveDestination", "a", 0),
                           ("replicationChannel", "a", 0), ("encodedCredentials", "d", 8),
                           ("srcResponseChannel", "a", 10)]),
    "MaxRecordedPositionRequest": (67, 24, [_CS, _CO, _f("recordingId", I8, 16)], []),
    "ArchiveIdRequest": (68, 16, [_CS, _CO], []),
    "RecordingStarted": (101, 24, [_f("recordingId", I8, 0), _f("startPosition", I8, 8), _f("sessionId", I4, 16),
                                   _f("streamId", I4, 20)], [("channel", "a", 0), ("sourceIdentity", "a", 0)]),
    "RecordingProgress": (102, 24, [_f("recordingId", I8, 0), _f("startPosition", I8, 8),
                                    _f("position", I8, 16)], []),
    "RecordingStopped": (103, 24, [_f("recordingId", I8, 0), _f("startPosition", I8, 8),
                                   _f("stopPosition", I8, 16)], []),
    "PurgeRecordingRequest": (104, 24, [_CS, _CO, _f("recordingId", I8, 16)], []),
    "ReplayTokenRequest": (105, 24, [_CS, _CO, _f("recordingId", I8, 16)], []),
    "Ping": (106, 8, [_CS], []),
    "UpdateChannelRequest": (107, 24, [_CS, _CO, _f("recordingId", I8, 16)], [("channel", "a", 0)]),
    # This project's extensions, transcribed from docs/control-protocol.md ("Time index requests"), not Aeron's.
    "PositionAtTimeRequest": (1001, 32, [_CS, _CO, _f("recordingId", I8, 16), _f("timestampNs", I8, 24)], []),
    "TimeIndexRequest": (1002, 40, [_CS, _CO, _f("recordingId", I8, 16), _f("fromPosition", I8, 24),
                                    _f("toPosition", I8, 32)], []),
    "TimeIndexSamples": (1003, 32, [_CS, _CO, _f("recordingId", I8, 16), _f("intervalNs", I8, 24)],
                         [("samples", "d", 0)]),
    "TimeIndexesRequest": (1004, 16, [_CS, _CO], [("ranges", "d", 0)]),
}
EXTENSIONS = ("PositionAtTimeRequest", "TimeIndexRequest", "TimeIndexSamples", "TimeIndexesRequest")

MESSAGE_NAMES = sorted(EXPECTED, key=lambda n: EXPECTED[n][0])
ENUM_FIELDS = {"code", "sourceLocation", "applyStreamId", "autoStop", "signal", "state"}


def _snake(name: str) -> str:
    return "".join("_" + ch.lower() if ch.isupper() else ch for ch in name)


def _sample_values(name: str) -> dict[str, Any]:
    """Distinct, sign-varied values per field so a misplaced field cannot go unnoticed."""
    _tid, _bl, fixed, var = EXPECTED[name]
    values: dict[str, Any] = {}
    for i, (fname, code, _off, _since) in enumerate(fixed):
        if fname in ENUM_FIELDS:
            values[_snake(fname)] = 1
        elif code == I8:
            values[_snake(fname)] = (0x0102030405060708 * (i + 1)) * (-1 if i % 2 else 1)
        elif code == I4:
            values[_snake(fname)] = (0x01020304 + i * 0x111) * (-1 if i % 2 else 1)
        else:
            values[_snake(fname)] = -(i + 1)
    for j, (vname, kind, _since) in enumerate(var):
        text = f"aeron:udp?endpoint=host{j}:{40000 + j}|{vname}"
        values[_snake(vname)] = text if kind == "a" else bytes(range(j, j + 17))
    return values


def _manual(block_length: int, template_id: int, version: int, block: bytes, *var: bytes,
            schema_id: int = 101) -> bytes:
    out = struct.pack("<HHHH", block_length, template_id, schema_id, version) + block
    for v in var:
        out += struct.pack("<I", len(v)) + v
    return out


# ----------------------------------------------------------------------------------------------------------------
# Schema and constants
# ----------------------------------------------------------------------------------------------------------------


def test_schema_identity() -> None:
    assert CODEC.schema_id == templates.SCHEMA_ID == 101
    assert CODEC.schema_version == templates.SCHEMA_VERSION == 14
    assert CODEC.header_length == templates.MESSAGE_HEADER_LENGTH == 8
    assert CODEC.package == "io.aeron.archive.codecs"
    assert CODEC.semantic_version == "5.2"
    assert CODEC.byte_order == "<"
    assert load_archive_codec() is load_archive_codec() is CODEC


def test_every_facts_sheet_message_is_in_the_schema_and_nothing_else() -> None:
    assert sorted(spec.name for spec in CODEC.messages) == sorted(EXPECTED)


def test_extensions_stay_clear_of_aerons_template_ids() -> None:
    """Our own messages sit at 1001+, so no Aeron message (1 to 107 in v14) can collide with one."""
    aeron = [EXPECTED[name][0] for name in EXPECTED if name not in EXTENSIONS]
    ours = [EXPECTED[name][0] for name in EXTENSIONS]
    assert max(aeron) < 1000 < min(ours)
    assert (templates.POSITION_AT_TIME_REQUEST, templates.TIME_INDEX_REQUEST, templates.TIME_INDEX_SAMPLES,
            templates.TIME_INDEXES_REQUEST) == (1001, 1002, 1003, 1004)


def test_template_constants_match_schema() -> None:
    constants_by_name = {k: v for k, v in vars(templates).items()
                         if k.isupper() and isinstance(v, int)
                         and k not in ("SCHEMA_ID", "SCHEMA_VERSION", "MESSAGE_HEADER_LENGTH")}
    assert set(constants_by_name.values()) == {spec.template_id for spec in CODEC.messages}
    for template_id, name in templates.TEMPLATE_NAMES.items():
        assert CODEC.template_id(name) == template_id
        assert EXPECTED[name][0] == template_id
    assert templates.AUTH_CONNECT_REQUEST == 58
    assert templates.UPDATE_CHANNEL_REQUEST == 107
    assert templates.CONNECT_REQUEST == 2


@pytest.mark.parametrize("name", MESSAGE_NAMES)
def test_layout_matches_facts_sheet(name: str) -> None:
    template_id, block_length, fixed, var = EXPECTED[name]
    spec = CODEC.message(name)
    assert spec.template_id == template_id
    assert spec.block_length == block_length
    assert [(f.name, f.struct_format, f.offset, f.since_version) for f in spec.fields] == fixed
    assert [(v.name, "a" if v.is_text else "d", v.since_version) for v in spec.var_fields] == var
    for v in spec.var_fields:
        assert v.length_primitive == "uint32" and v.max_length == 1 << 30
    assert CODEC.message(template_id) is spec


def test_message_since_versions() -> None:
    expected = {"ReplicateRequest2": 6, "MaxRecordedPositionRequest": 9, "ArchiveIdRequest": 9,
                "PurgeRecordingRequest": 5, "ReplayTokenRequest": 10, "Ping": 11, "UpdateChannelRequest": 13}
    for spec in CODEC.messages:
        assert spec.since_version == expected.get(spec.name, 0), spec.name


def test_enums_match_constants_module() -> None:
    pairs = {
        "ControlResponseCode": constants.ControlResponseCode,
        "SourceLocation": constants.SourceLocation,
        "RecordingSignal": constants.RecordingSignal,
        "RecordingState": constants.RecordingState,
    }
    for schema_name, py_enum in pairs.items():
        spec = CODEC.enums[schema_name]
        assert spec.primitive_type == "int32"
        assert spec.values == {m.name: m.value for m in py_enum}
        assert spec.null_value == INT32_NULL
    assert CODEC.enums["BooleanType"].values == {"FALSE": 0, "TRUE": 1}
    assert CODEC.enums["ControlResponseCode"].python_type.ERROR == 1


def test_field_metadata() -> None:
    spec = CODEC.message("ReplayRequest")
    f = spec.field("file_io_max_length")
    assert (f.name, f.primitive_type, f.offset, f.size, f.since_version) == ("fileIoMaxLength", "int32", 44, 4, 7)
    assert f.null_value == INT32_NULL and not f.optional and f.default == 0
    version = CODEC.message("ControlResponse").field("version")
    assert version.type_name == "version_t" and version.optional and version.null_value == 0
    code = CODEC.message("ControlResponse").field("code")
    assert code.enum is not None and code.enum.name == "ControlResponseCode"
    ts = CODEC.message("RecordingDescriptor").field("startTimestamp")
    assert ts.type_name == "time_t" and ts.primitive_type == "int64"
    assert CODEC.message("AuthConnectRequest").field("encoded_credentials").text_encoding is None
    assert CODEC.message("AuthConnectRequest").field("clientInfo").text_encoding == "ascii"


# ----------------------------------------------------------------------------------------------------------------
# Encoding at the byte level and round trips
# ----------------------------------------------------------------------------------------------------------------


def test_replay_request_bytes_at_documented_offsets() -> None:
    data = CODEC.encode("ReplayRequest", control_session_id=11, correlation_id=22, recording_id=33, position=4096,
                        length=-1, replay_stream_id=1001, file_io_max_length=65536, replay_token=-7,
                        replay_channel="aeron:udp?endpoint=localhost:0")
    assert struct.unpack_from("<HHHH", data, 0) == (56, 6, 101, 14)
    body = 8
    assert struct.unpack_from("<q", data, body + 0)[0] == 11
    assert struct.unpack_from("<q", data, body + 8)[0] == 22
    assert struct.unpack_from("<q", data, body + 16)[0] == 33
    assert struct.unpack_from("<q", data, body + 24)[0] == 4096
    assert struct.unpack_from("<q", data, body + 32)[0] == -1
    assert struct.unpack_from("<i", data, body + 40)[0] == 1001
    assert struct.unpack_from("<i", data, body + 44)[0] == 65536
    assert struct.unpack_from("<q", data, body + 48)[0] == -7
    channel = b"aeron:udp?endpoint=localhost:0"
    assert struct.unpack_from("<I", data, body + 56)[0] == len(channel)
    assert data[body + 60:] == channel
    assert len(data) == 8 + 56 + 4 + len(channel)


@pytest.mark.parametrize("name", MESSAGE_NAMES)
def test_round_trip_every_message(name: str) -> None:
    template_id, block_length, fixed, var = EXPECTED[name]
    values = _sample_values(name)
    data = CODEC.encode(name, **values)

    assert struct.unpack_from("<HHHH", data, 0) == (block_length, template_id, 101, 14)
    for fname, code, offset, _since in fixed:
        assert struct.unpack_from("<" + code, data, 8 + offset)[0] == values[_snake(fname)], fname
    pos = 8 + block_length
    for vname, kind, _since in var:
        n = struct.unpack_from("<I", data, pos)[0]
        raw = data[pos + 4:pos + 4 + n]
        expected = values[_snake(vname)]
        assert raw == (expected.encode("ascii") if kind == "a" else expected), vname
        pos += 4 + n
    assert pos == len(data)

    msg = CODEC.decode(data)
    assert isinstance(msg, Message)
    assert msg.as_dict() == values
    assert (msg.name, msg.template_id, msg.schema_id, msg.block_length, msg.encoded_length) == (
        name, template_id, 101, block_length, len(data))
    assert msg.header == (block_length, template_id, 101, 14)
    for attr, value in values.items():
        assert getattr(msg, attr) == value
    assert CODEC.decode(CODEC.encode(template_id, **values)) == msg


def test_by_name_and_by_template_id_encode_identically() -> None:
    a = CODEC.encode("KeepAliveRequest", control_session_id=5, correlation_id=-1)
    b = CODEC.encode(templates.KEEP_ALIVE_REQUEST, control_session_id=5, correlation_id=-1)
    assert a == b == struct.pack("<HHHHqq", 16, 61, 101, 14, 5, -1)


def test_defaults_for_missing_fields() -> None:
    msg = CODEC.decode(CODEC.encode("ControlResponse", control_session_id=3))
    assert msg.correlation_id == 0 and msg.relevant_id == 0 and msg.code == 0
    assert msg.version == 0  # version_t is optional with nullValue 0
    assert msg.error_message == ""
    auth = CODEC.decode(CODEC.encode("AuthConnectRequest", correlation_id=1))
    assert auth.encoded_credentials == b"" and auth.client_info == "" and auth.response_channel == ""


def test_header_metadata_vs_field_named_version() -> None:
    data = CODEC.encode("ControlResponse", code=constants.ControlResponseCode.OK,
                        version=constants.PROTOCOL_SEMANTIC_VERSION)
    msg = CODEC.decode(data)
    assert msg.version == 68608  # the field wins
    assert msg.header.version == 14  # the header stays reachable
    replay = CODEC.decode(CODEC.encode("ReplayRequest"))
    assert replay.version == 14 == replay.header.version


def test_gaps_from_explicit_offsets_are_zero() -> None:
    buf = bytearray(b"\xff" * 64)
    n = CODEC.encode_into(buf, 0, "CatalogHeader", version=196864, length=32, next_recording_id=7, alignment=64)
    assert n == 40
    assert buf[8 + 20:8 + 31] == bytes(11)
    assert struct.unpack_from("<iiqib", buf, 8)[:4] == (196864, 32, 7, 64)
    assert buf[8 + 31] == 0 and buf[40:] == b"\xff" * 24
    assert CODEC.encode_body("CatalogHeader", version=196864, length=32, next_recording_id=7, alignment=64) == (
        bytes(buf[8:40]))


def test_enum_fields_accept_ints_intenums_and_names() -> None:
    by_int = CODEC.encode("ControlResponse", code=1)
    by_enum = CODEC.encode("ControlResponse", code=constants.ControlResponseCode.ERROR)
    by_name = CODEC.encode("ControlResponse", code="ERROR")
    assert by_int == by_enum == by_name
    assert CODEC.decode(by_name).code == 1 and type(CODEC.decode(by_name).code) is int


def test_var_data_accepts_bytes_like() -> None:
    creds = bytes(range(256))
    for value in (creds, bytearray(creds), memoryview(creds)):
        msg = CODEC.decode(CODEC.encode("AuthConnectRequest", encoded_credentials=value))
        assert msg.encoded_credentials == creds


def test_encode_into_matches_encode() -> None:
    fields = dict(control_session_id=9, correlation_id=10, stream_id=1001, source_location=1,
                  channel="aeron:ipc?alias=x")
    expected = CODEC.encode("StartRecordingRequest", **fields)
    buf = bytearray(200)
    n = CODEC.encode_into(buf, 17, "StartRecordingRequest", **fields)
    assert n == len(expected) and bytes(buf[17:17 + n]) == expected
    target = memoryview(bytearray(200))
    assert CODEC.encode_into(target, 0, "StartRecordingRequest", **fields) == n
    assert target[:n].tobytes() == expected
    assert CODEC.decode(buf, 17, n).channel == "aeron:ipc?alias=x"


def test_encode_into_too_small_or_read_only_buffer() -> None:
    with pytest.raises(CodecError, match="buffer too small to encode ReplayRequest"):
        CODEC.encode_into(bytearray(60), 0, "ReplayRequest", replay_channel="aeron:ipc")
    with pytest.raises(CodecError, match="read-only buffer"):
        CODEC.encode_into(bytes(100), 0, "Ping")
    with pytest.raises(CodecError, match="read-only buffer"):
        CODEC.encode_into(memoryview(bytes(100)), 0, "Ping")


def test_non_byte_buffers_are_viewed_as_bytes() -> None:
    words = np.zeros(8, dtype=np.int32)  # 32 bytes, but len() == 8
    assert CODEC.encode_into(words, 4, "Ping", control_session_id=77) == 16
    assert CODEC.decode(words, 4).control_session_id == 77
    assert CODEC.decode(words, 4, 16).encoded_length == 16
    with pytest.raises(CodecError, match="cannot use ndarray as a byte buffer"):
        CODEC.decode(np.zeros((4, 4))[:, 1])


# ----------------------------------------------------------------------------------------------------------------
# Version and block-length compatibility
# ----------------------------------------------------------------------------------------------------------------


def test_older_replay_request_block_44_version_6() -> None:
    block = struct.pack("<qqqqqi", 1, 2, 3, 1024, 4096, 1001)
    assert len(block) == 44
    data = _manual(44, 6, 6, block, b"aeron:ipc")
    msg = CODEC.decode(data)
    assert (msg.control_session_id, msg.correlation_id, msg.recording_id, msg.position, msg.length,
            msg.replay_stream_id) == (1, 2, 3, 1024, 4096, 1001)
    assert msg.file_io_max_length == INT32_NULL
    assert msg.replay_token == INT64_NULL
    assert msg.replay_channel == "aeron:ipc"
    assert (msg.block_length, msg.version, msg.encoded_length) == (44, 6, len(data))


def test_since_version_applies_even_when_bytes_are_present() -> None:
    # Full 56-byte block but an old acting version: the newer fields must not be read.
    block = struct.pack("<qqqqqiiq", 1, 2, 3, 0, -1, 5, 65536, 99)
    v6 = CODEC.decode(_manual(56, 6, 6, block, b"x"))
    assert v6.file_io_max_length == INT32_NULL and v6.replay_token == INT64_NULL
    v9 = CODEC.decode(_manual(56, 6, 9, block, b"x"))
    assert v9.file_io_max_length == 65536 and v9.replay_token == INT64_NULL
    v10 = CODEC.decode(_manual(56, 6, 10, block, b"x"))
    assert v10.file_io_max_length == 65536 and v10.replay_token == 99


def test_older_control_response_without_version_field() -> None:
    data = _manual(28, 1, 3, struct.pack("<qqqi", 7, 8, 9, 1), b"boom")
    msg = CODEC.decode(data)
    assert (msg.control_session_id, msg.correlation_id, msg.relevant_id, msg.code) == (7, 8, 9, 1)
    assert msg.version == 0 and msg.error_message == "boom"


def test_longer_block_from_newer_peer_is_skipped() -> None:
    block = struct.pack("<qqqqqiiq", 1, 2, 3, 4, 5, 6, 7, 8) + b"\xab" * 12
    data = _manual(68, 6, 15, block, b"aeron:ipc")
    msg = CODEC.decode(data)
    assert (msg.recording_id, msg.replay_token, msg.replay_channel) == (3, 8, "aeron:ipc")
    assert (msg.block_length, msg.version, msg.encoded_length) == (68, 15, len(data))


def test_connect_request_from_1_52_client() -> None:
    data = _manual(16, 2, 13, struct.pack("<qii", 42, 20, constants.PROTOCOL_SEMANTIC_VERSION),
                   b"aeron:udp?endpoint=localhost:0")
    msg = CODEC.decode(data)
    assert msg.name == "ConnectRequest" and msg.template_id == templates.CONNECT_REQUEST
    assert (msg.correlation_id, msg.response_stream_id, msg.version) == (42, 20, 68608)
    assert msg.response_channel == "aeron:udp?endpoint=localhost:0"


def test_auth_connect_request_with_and_without_client_info() -> None:
    block = struct.pack("<qii", 42, 20, 68608)
    v12 = _manual(16, 58, 12, block, b"aeron:ipc", b"\x01\x02", b"name=test version=1.52.2 commit=abc")
    msg = CODEC.decode(v12)
    assert msg.encoded_credentials == b"\x01\x02"
    assert msg.client_info == "name=test version=1.52.2 commit=abc"
    assert msg.encoded_length == len(v12)
    # A v11 client sends no clientInfo at all: decoding must not read past the credentials.
    v11 = _manual(16, 58, 11, block, b"aeron:ipc", b"") + b"\x00" * 3
    old = CODEC.decode(v11)
    assert old.client_info == "" and old.encoded_credentials == b"" and old.encoded_length == len(v11) - 3


def test_replicate_request2_version_7_lacks_v8_and_v10_fields() -> None:
    block = struct.pack("<qqqqqqqii", 1, 2, 3, 4, 5, 6, 7, 10, 65536)
    assert len(block) == 64
    data = _manual(64, 66, 7, block, b"src", b"live", b"repl")
    msg = CODEC.decode(data)
    assert msg.file_io_max_length == 65536 and msg.replication_session_id == INT32_NULL
    assert (msg.src_control_channel, msg.live_destination, msg.replication_channel) == ("src", "live", "repl")
    assert msg.encoded_credentials == b"" and msg.src_response_channel == ""
    assert msg.encoded_length == len(data)


def test_recording_descriptor_with_63_padding_bytes() -> None:
    values = _sample_values("RecordingDescriptor")
    data = CODEC.encode("RecordingDescriptor", **values)
    padded = data + bytes(63)
    msg = CODEC.decode(padded)
    assert msg.as_dict() == values
    assert msg.encoded_length == len(data)
    assert CODEC.decode(padded, 0, len(padded)).source_identity == values["source_identity"]


def test_recording_descriptor_catalog_form_without_header() -> None:
    values = _sample_values("RecordingDescriptor")
    body = CODEC.encode_body("RecordingDescriptor", **values)
    assert body == CODEC.encode("RecordingDescriptor", **values)[8:]
    entry = bytearray(32) + body + bytes(64 - (32 + len(body)) % 64)
    msg = CODEC.decode_body("RecordingDescriptor", entry, 32)
    assert msg.as_dict() == values and msg.encoded_length == len(body)
    header = CODEC.decode_body("RecordingDescriptorHeader", struct.pack("<iii", 160, 1, 0) + bytes(20))
    assert (header.length, header.state, header.checksum, header.reserved) == (160, 1, 0, 0)


def test_decode_at_offset_and_from_memoryview() -> None:
    one = CODEC.encode("RecordingProgress", recording_id=1, start_position=0, position=4096)
    two = CODEC.encode("RecordingStopped", recording_id=1, start_position=0, stop_position=8192)
    buf = bytearray(b"\xee" * 5) + one + two
    view = memoryview(bytes(buf))
    first = CODEC.decode(view, 5)
    second = CODEC.decode(view, 5 + first.encoded_length)
    assert (first.name, first.position) == ("RecordingProgress", 4096)
    assert (second.name, second.stop_position) == ("RecordingStopped", 8192)
    assert CODEC.peek_header(buf, 5) == (24, 102, 101, 14)


# ----------------------------------------------------------------------------------------------------------------
# Malformed input
# ----------------------------------------------------------------------------------------------------------------


def test_truncated_header() -> None:
    with pytest.raises(CodecError, match="too short for message header"):
        CODEC.decode(b"\x38\x00\x06\x00\x65")


def test_truncated_block() -> None:
    data = CODEC.encode("ReplayRequest", replay_channel="aeron:ipc")
    with pytest.raises(CodecError, match="buffer too short for block of message ReplayRequest"):
        CODEC.decode(data[:40])
    with pytest.raises(CodecError, match="block of message ReplayRequest"):
        CODEC.decode(data, 0, 50)


def test_bad_var_length() -> None:
    block = struct.pack("<qqqqqiiq", 1, 2, 3, 4, 5, 6, 7, 8)
    lying = struct.pack("<HHHH", 56, 6, 101, 14) + block + struct.pack("<I", 1000) + b"aeron:ipc"
    with pytest.raises(CodecError, match="var field replay_channel of message ReplayRequest length 1000 exceeds "
                                         "the remaining 9 bytes"):
        CODEC.decode(lying)
    huge = struct.pack("<HHHH", 56, 6, 101, 14) + block + struct.pack("<I", 0xFFFFFFFF)
    with pytest.raises(CodecError, match="length 4294967295 exceeds the maximum 1073741824"):
        CODEC.decode(huge)
    no_length = struct.pack("<HHHH", 56, 6, 101, 14) + block + b"\x01\x00"
    with pytest.raises(CodecError, match="length of var field replay_channel"):
        CODEC.decode(no_length)


def test_wrong_schema_id() -> None:
    data = bytearray(CODEC.encode("KeepAliveRequest"))
    struct.pack_into("<H", data, 4, 99)
    with pytest.raises(CodecError, match="schema id 99 != 101"):
        CODEC.decode(data)


def test_unknown_template_id() -> None:
    with pytest.raises(CodecError, match="unknown template id 999"):
        CODEC.decode(struct.pack("<HHHH", 0, 999, 101, 14))


def test_bad_offset_and_length_arguments() -> None:
    data = CODEC.encode("KeepAliveRequest")
    with pytest.raises(CodecError, match="outside the buffer"):
        CODEC.decode(data, 100)
    with pytest.raises(CodecError, match="exceeds the buffer"):
        CODEC.decode(data, 0, 100)


def test_codec_error_is_a_value_error() -> None:
    assert issubclass(CodecError, ValueError) and issubclass(SchemaError, CodecError)


@pytest.mark.parametrize("name", MESSAGE_NAMES)
def test_every_truncation_raises_codec_error(name: str) -> None:
    data = CODEC.encode(name, **_sample_values(name))
    for cut in range(len(data)):
        with pytest.raises(CodecError):
            CODEC.decode(data[:cut])


def test_random_garbage_only_raises_codec_error() -> None:
    rng = random.Random(1234)
    seeds = [CODEC.encode(n, **_sample_values(n)) for n in MESSAGE_NAMES]
    for _ in range(3000):
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 6)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        if rng.random() < 0.5:
            struct.pack_into("<HH", data, 2, rng.choice(list(templates.TEMPLATE_NAMES)), 101)
        try:
            CODEC.decode(bytes(data[:rng.randint(0, len(data))]))
        except CodecError:
            pass


def test_encode_errors_name_the_problem() -> None:
    with pytest.raises(CodecError, match="unknown field 'recording_idd' for message ReplayRequest"):
        CODEC.encode("ReplayRequest", recording_idd=1)
    with pytest.raises(CodecError, match="field replay_stream_id of message ReplayRequest value 4294967296 does "
                                         "not fit int32"):
        CODEC.encode("ReplayRequest", replay_stream_id=1 << 32)
    with pytest.raises(CodecError, match="field position of message ReplayRequest takes an int"):
        CODEC.encode("ReplayRequest", position=1.5)
    with pytest.raises(CodecError, match="'MAYBE' is not a ControlResponseCode value"):
        CODEC.encode("ControlResponse", code="MAYBE")
    with pytest.raises(CodecError, match="var field replay_channel of message ReplayRequest"):
        CODEC.encode("ReplayRequest", replay_channel="aeron:udp?endpoint=h\u00f6st:1")
    with pytest.raises(CodecError, match="takes str or bytes"):
        CODEC.encode("ReplayRequest", replay_channel=5)
    with pytest.raises(CodecError, match="unknown message 'NoSuchRequest'"):
        CODEC.encode("NoSuchRequest")
    with pytest.raises(CodecError, match="unknown message 12345"):
        CODEC.message(12345)


# ----------------------------------------------------------------------------------------------------------------
# Message objects and numpy layouts
# ----------------------------------------------------------------------------------------------------------------


def test_message_is_immutable_hashable_and_compares_by_fields() -> None:
    a = CODEC.decode(CODEC.encode("KeepAliveRequest", control_session_id=1, correlation_id=2))
    b = CODEC.decode(CODEC.encode("KeepAliveRequest", control_session_id=1, correlation_id=2) + b"\x00")
    assert a == b and hash(a) == hash(b)
    assert a != CODEC.decode(CODEC.encode("KeepAliveRequest", control_session_id=1, correlation_id=3))
    assert a != CODEC.decode(CODEC.encode("ArchiveIdRequest", control_session_id=1, correlation_id=2))
    with pytest.raises(AttributeError):
        a.correlation_id = 5  # type: ignore[misc]
    with pytest.raises(AttributeError):
        _ = a.no_such_field  # type: ignore[attr-defined]
    assert repr(a) == "KeepAliveRequest(control_session_id=1, correlation_id=2)"
    assert type(a).__name__ == "KeepAliveRequest"


def test_numpy_dtype_of_recording_descriptor() -> None:
    dtype = CODEC.numpy_dtype("RecordingDescriptor")
    assert dtype.itemsize == 80
    _tid, _bl, fixed, _var = EXPECTED["RecordingDescriptor"]
    assert dtype.names == tuple(_snake(n) for n, *_ in fixed)
    for fname, code, offset, _since in fixed:
        field_dtype, field_offset = dtype.fields[_snake(fname)]
        assert field_offset == offset
        assert field_dtype == np.dtype("<i8" if code == I8 else "<i4")

    # Vectorised decode of several fixed blocks equals the per-message decode.
    bodies = []
    for rid in range(3):
        values = _sample_values("RecordingDescriptor") | {"recording_id": rid}
        bodies.append(CODEC.encode_body("RecordingDescriptor", **values)[:80])
    arr = np.frombuffer(b"".join(bodies), dtype=dtype)
    assert arr["recording_id"].tolist() == [0, 1, 2]
    assert int(arr["stop_position"][1]) == _sample_values("RecordingDescriptor")["stop_position"]


def test_numpy_dtype_keeps_gaps() -> None:
    dtype = CODEC.numpy_dtype("CatalogHeader")
    assert dtype.itemsize == 32
    assert dtype.fields["reserved"][1] == 31 and dtype.fields["alignment"][1] == 16


# ----------------------------------------------------------------------------------------------------------------
# General schemas (the connector loads users' schemas through the same class)
# ----------------------------------------------------------------------------------------------------------------

_USER_SCHEMA = """<?xml version="1.0" encoding="UTF-8"?>
<sbe:messageSchema xmlns:sbe="http://fixprotocol.io/2016/sbe" package="demo" id="7" version="3" byteOrder="bigEndian">
  <types>
    <composite name="messageHeader">
      <type name="blockLength" primitiveType="uint16"/>
      <type name="templateId" primitiveType="uint16"/>
      <type name="schemaId" primitiveType="uint16"/>
      <type name="version" primitiveType="uint16"/>
    </composite>
    <composite name="varStringEncoding">
      <type name="length" primitiveType="uint16"/>
      <type name="varData" primitiveType="uint8" length="0" characterEncoding="UTF-8"/>
    </composite>
    <composite name="decimal">
      <type name="mantissa" primitiveType="int64"/>
      <type name="exponent" primitiveType="int8"/>
    </composite>
    <type name="Symbol" primitiveType="char" length="8"/>
    <type name="Venue" primitiveType="char" length="4" presence="constant">XLON</type>
    <enum name="Side" encodingType="uint8">
      <validValue name="BUY">1</validValue>
      <validValue name="SELL">2</validValue>
    </enum>
  </types>
  <sbe:message name="Trade" id="1">
    <field name="symbol" id="1" type="Symbol"/>
    <field name="price" id="2" type="decimal"/>
    <field name="venue" id="3" type="Venue"/>
    <field name="side" id="4" type="Side" offset="20"/>
    <field name="qty" id="5" type="uint32" presence="optional" sinceVersion="2"/>
    <data name="note" id="6" type="varStringEncoding"/>
  </sbe:message>
</sbe:messageSchema>
"""


def test_user_schema_with_composites_char_arrays_constants_and_big_endian() -> None:
    codec = SbeCodec.from_xml(_USER_SCHEMA)
    spec = codec.message("Trade")
    assert [(f.attr, f.offset, f.size) for f in spec.fields] == [
        ("symbol", 0, 8), ("price_mantissa", 8, 8), ("price_exponent", 16, 1), ("venue", 17, 0), ("side", 20, 1),
        ("qty", 21, 4)]
    assert spec.block_length == 25
    data = codec.encode("Trade", symbol="VOD", price_mantissa=12345, price_exponent=-2, side="SELL", qty=10,
                        note="caf\u00e9")
    assert struct.unpack_from(">HHHH", data) == (25, 1, 7, 3)
    assert data[8:16] == b"VOD\x00\x00\x00\x00\x00"
    assert struct.unpack_from(">qb", data, 16) == (12345, -2)
    msg = codec.decode(data)
    assert (msg.symbol, msg.price_mantissa, msg.price_exponent, msg.venue, msg.side, msg.qty, msg.note) == (
        "VOD", 12345, -2, "XLON", 2, 10, "caf\u00e9")
    old = codec.decode(struct.pack(">HHHH", 21, 1, 7, 1) + data[8:29] + data[33:])
    assert old.qty == (1 << 32) - 1  # uint32 null: block too short and sinceVersion 2 > 1
    assert old.note == "caf\u00e9"
    assert codec.numpy_dtype("Trade").fields["price_mantissa"][0] == np.dtype(">i8")
    with pytest.raises(CodecError, match="field symbol of message Trade holds 8 bytes, got 9"):
        codec.encode("Trade", symbol="TOOLONGXX")


def test_user_schema_errors() -> None:
    with pytest.raises(SchemaError, match="group 'legs' dimensionType: unknown type 'groupSizeEncoding'"):
        SbeCodec.from_xml(_USER_SCHEMA.replace('<data name="note"', '<group name="legs" id="9"></group>'
                                                                    '<data name="note"'))
    with pytest.raises(SchemaError, match="unknown type 'Nope'"):
        SbeCodec.from_xml(_USER_SCHEMA.replace('type="Side"', 'type="Nope"'))
    with pytest.raises(SchemaError, match="offset 4 overlaps"):
        SbeCodec.from_xml(_USER_SCHEMA.replace('offset="20"', 'offset="4"'))
    with pytest.raises(SchemaError, match="not well-formed"):
        SbeCodec.from_xml("<messageSchema id='1'>")
    with pytest.raises(SchemaError, match="cannot read SBE schema"):
        SbeCodec.from_xml("/nonexistent/schema.xml")


def test_user_schema_with_xinclude(tmp_path: Any) -> None:
    start = _USER_SCHEMA.index("  <types>")
    stop = _USER_SCHEMA.index("</types>") + len("</types>")
    (tmp_path / "types.xml").write_text(_USER_SCHEMA[start:stop])
    main = (_USER_SCHEMA[:start].replace('xmlns:sbe=', 'xmlns:xi="http://www.w3.org/2001/XInclude" xmlns:sbe=')
            + '  <xi:include href="types.xml"/>' + _USER_SCHEMA[stop:])
    (tmp_path / "schema.xml").write_text(main)
    codec = SbeCodec.from_xml(tmp_path / "schema.xml")
    assert codec.message("Trade").block_length == 25
    (tmp_path / "types.xml").unlink()
    with pytest.raises(SchemaError, match="cannot resolve xi:include"):
        SbeCodec.from_xml(tmp_path / "schema.xml")


# -- typed messages (messages.py, generated from the schema) ------------------------------------------------------
def test_the_messages_module_is_what_the_generator_makes_of_the_schema() -> None:
    from pathlib import Path

    from aeron_archive_spark.archive.codecs import messages
    from aeron_archive_spark.archive.codecs.archive_codec import load_archive_codec_without_classes
    from aeron_archive_spark.archive.codecs.generate import render

    expected = render(load_archive_codec_without_classes())
    assert Path(messages.__file__).read_text() == expected, (
        "archive/codecs/messages.py is stale: run `python -m aeron_archive_spark.archive.codecs.generate`")
    assert [cls.TEMPLATE_ID for cls in messages.MESSAGE_CLASSES] == sorted(templates.TEMPLATE_NAMES)
    assert {cls.__name__: cls.TEMPLATE_ID for cls in messages.MESSAGE_CLASSES} == {
        name: template_id for template_id, name in templates.TEMPLATE_NAMES.items()}


@pytest.mark.parametrize("name", MESSAGE_NAMES)
def test_every_message_decodes_into_its_declared_class_and_of_builds_the_same(name: str) -> None:
    from aeron_archive_spark.archive.codecs import messages

    cls = getattr(messages, name)
    values = _sample_values(name)
    decoded = CODEC.decode(CODEC.encode(name, **values))
    assert type(decoded) is cls
    built = cls.of(**values)
    assert type(built) is cls and built == decoded and built.as_dict() == values
    assert (built.block_length, built.version if name not in VERSIONED else built.header.version) == (
        decoded.block_length, 14)
    assert CODEC.encode_message(built) == CODEC.encode(name, **values)


VERSIONED = {"ControlResponse", "ConnectRequest", "AuthConnectRequest", "Challenge", "CatalogHeader"}


def test_of_leaves_out_only_what_the_protocol_added_later_and_refuses_unknown_fields() -> None:
    from aeron_archive_spark.archive.codecs import messages

    replay = messages.ReplayRequest.of(control_session_id=1, correlation_id=2, recording_id=3, position=0,
                                       length=-1, replay_stream_id=4, replay_channel="aeron:ipc")
    assert (replay.file_io_max_length, replay.replay_token) == (0, 0)  # since versions 7 and 10: Java's null
    with pytest.raises(TypeError):
        messages.StopReplayRequest.of(control_session_id=1, correlation_id=2)  # type: ignore[call-arg]
    with pytest.raises(CodecError, match="no field"):
        messages.StopReplayRequest._of(control_session_id=1, correlation_id=2, replay_session_id=3, bogus=4)
