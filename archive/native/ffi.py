"""cffi ABI-mode declarations for the Aeron C client API (aeronc.h, Aeron 1.53) exported by pyaeron's extension.

pyaeron's Python API has no block poll, offer_block or counters, but its extension module links the whole Aeron C
client and exports every `aeron_*` symbol. We `dlopen` that already-loaded module (so there is exactly one copy of
the C client in the process) and declare only what `aeron_archive_spark.archive.native` uses. Layouts follow
aeronc.h; structs under `#pragma pack(4)` there are declared with `pack=4` here.

`ffi` is created at import (declarations are cheap); `lib` is opened lazily by `get_lib()` so that importing this
module never fails just because pyaeron is missing.
"""

from __future__ import annotations

import threading
from typing import Any

import cffi

# Aeron publication result codes (aeronc.h AERON_PUBLICATION_*).
NOT_CONNECTED = -1
BACK_PRESSURED = -2
ADMIN_ACTION = -3
PUBLICATION_CLOSED = -4
MAX_POSITION_EXCEEDED = -5
PUBLICATION_ERROR = -6

# Counter record states and key / label sizes (aeronc.h AERON_COUNTER_*) are in archive/constants.py, shared with
# recording_pos.

# aeron_controlled_fragment_handler_action_t.
ACTION_ABORT = 1
ACTION_BREAK = 2
ACTION_COMMIT = 3
ACTION_CONTINUE = 4

_CDEF = """
typedef struct aeron_context_stct aeron_context_t;
typedef struct aeron_stct aeron_t;
typedef struct aeron_publication_stct aeron_publication_t;
typedef struct aeron_exclusive_publication_stct aeron_exclusive_publication_t;
typedef struct aeron_header_stct aeron_header_t;
typedef struct aeron_subscription_stct aeron_subscription_t;
typedef struct aeron_image_stct aeron_image_t;
typedef struct aeron_counter_stct aeron_counter_t;
typedef struct aeron_counters_reader_stct aeron_counters_reader_t;
typedef struct aeron_client_registering_resource_stct aeron_async_add_publication_t;
typedef struct aeron_client_registering_resource_stct aeron_async_add_exclusive_publication_t;
typedef struct aeron_client_registering_resource_stct aeron_async_add_subscription_t;
typedef struct aeron_client_registering_resource_stct aeron_async_add_counter_t;
typedef struct aeron_image_fragment_assembler_stct aeron_image_fragment_assembler_t;
typedef struct aeron_image_controlled_fragment_assembler_stct aeron_image_controlled_fragment_assembler_t;
typedef struct aeron_fragment_assembler_stct aeron_fragment_assembler_t;
typedef struct aeron_controlled_fragment_assembler_stct aeron_controlled_fragment_assembler_t;

typedef enum aeron_controlled_fragment_handler_action_en
{
    AERON_ACTION_ABORT = 1,
    AERON_ACTION_BREAK = 2,
    AERON_ACTION_COMMIT = 3,
    AERON_ACTION_CONTINUE = 4
}
aeron_controlled_fragment_handler_action_t;

typedef void (*aeron_error_handler_t)(void *clientd, int errcode, const char *message);
typedef void (*aeron_notification_t)(void *clientd);
typedef void (*aeron_on_available_image_t)(void *clientd, aeron_subscription_t *subscription, aeron_image_t *image);
typedef void (*aeron_on_unavailable_image_t)(void *clientd, aeron_subscription_t *subscription, aeron_image_t *image);
typedef int64_t (*aeron_reserved_value_supplier_t)(void *clientd, uint8_t *buffer, size_t frame_length);
typedef void (*aeron_fragment_handler_t)(void *clientd, const uint8_t *buffer, size_t length, aeron_header_t *header);
typedef aeron_controlled_fragment_handler_action_t (*aeron_controlled_fragment_handler_t)(
    void *clientd, const uint8_t *buffer, size_t length, aeron_header_t *header);
typedef void (*aeron_block_handler_t)(
    void *clientd, const uint8_t *buffer, size_t length, int32_t session_id, int32_t term_id);
typedef void (*aeron_counters_reader_foreach_counter_func_t)(
    int64_t value, int32_t id, int32_t type_id, const uint8_t *key, size_t key_length,
    const char *label, size_t label_length, void *clientd);

typedef struct aeron_publication_constants_stct
{
    const char *channel;
    int64_t original_registration_id;
    int64_t registration_id;
    int64_t max_possible_position;
    size_t position_bits_to_shift;
    size_t term_buffer_length;
    size_t max_message_length;
    size_t max_payload_length;
    int32_t stream_id;
    int32_t session_id;
    int32_t initial_term_id;
    int32_t publication_limit_counter_id;
    int32_t channel_status_indicator_id;
}
aeron_publication_constants_t;

typedef struct aeron_subscription_constants_stct
{
    const char *channel;
    aeron_on_available_image_t on_available_image;
    aeron_on_unavailable_image_t on_unavailable_image;
    int64_t registration_id;
    int32_t stream_id;
    int32_t channel_status_indicator_id;
}
aeron_subscription_constants_t;

typedef struct aeron_image_constants_stct
{
    aeron_subscription_t *subscription;
    const char *source_identity;
    int64_t correlation_id;
    int64_t join_position;
    size_t position_bits_to_shift;
    size_t term_buffer_length;
    size_t mtu_length;
    int32_t session_id;
    int32_t initial_term_id;
    int32_t subscriber_position_id;
}
aeron_image_constants_t;

/* 1.53 layout as the binary writes it (aeron_counter_constants copies two int64 then the int32 counter id, 20
   bytes); older aeronc.h versions declare only registration_id + counter_id. The second id is unused here. */
typedef struct aeron_counter_constants_stct
{
    int64_t registration_id;
    int64_t original_registration_id;
    int32_t counter_id;
}
aeron_counter_constants_t;

int aeron_context_init(aeron_context_t **context);
int aeron_context_close(aeron_context_t *context);
int aeron_context_set_dir(aeron_context_t *context, const char *value);
const char *aeron_context_get_dir(aeron_context_t *context);
int aeron_context_set_driver_timeout_ms(aeron_context_t *context, uint64_t value);
int aeron_context_set_client_name(aeron_context_t *context, const char *value);
int aeron_context_set_idle_sleep_duration_ns(aeron_context_t *context, uint64_t value);
int aeron_context_set_idle_strategy_init_args(aeron_context_t *context, const char *value);
int aeron_context_set_idle_strategy(aeron_context_t *context, const char *value);
const char *aeron_context_get_idle_strategy(aeron_context_t *context);
int aeron_context_set_error_handler(aeron_context_t *context, aeron_error_handler_t handler, void *clientd);

int aeron_init(aeron_t **client, aeron_context_t *context);
int aeron_start(aeron_t *client);
int aeron_close(aeron_t *client);
bool aeron_is_closed(aeron_t *client);
int64_t aeron_client_id(aeron_t *client);
int64_t aeron_next_correlation_id(aeron_t *client);
aeron_counters_reader_t *aeron_counters_reader(aeron_t *client);

int aeron_async_add_publication(
    aeron_async_add_publication_t **async, aeron_t *client, const char *uri, int32_t stream_id);
int aeron_async_add_publication_poll(aeron_publication_t **publication, aeron_async_add_publication_t *async);
int aeron_async_add_exclusive_publication(
    aeron_async_add_exclusive_publication_t **async, aeron_t *client, const char *uri, int32_t stream_id);
int aeron_async_add_exclusive_publication_poll(
    aeron_exclusive_publication_t **publication, aeron_async_add_exclusive_publication_t *async);
int aeron_async_add_subscription(
    aeron_async_add_subscription_t **async, aeron_t *client, const char *uri, int32_t stream_id,
    aeron_on_available_image_t on_available_image_handler, void *on_available_image_clientd,
    aeron_on_unavailable_image_t on_unavailable_image_handler, void *on_unavailable_image_clientd);
int aeron_async_add_subscription_poll(aeron_subscription_t **subscription, aeron_async_add_subscription_t *async);
int aeron_async_add_counter(
    aeron_async_add_counter_t **async, aeron_t *client, int32_t type_id,
    const uint8_t *key_buffer, size_t key_buffer_length, const char *label_buffer, size_t label_buffer_length);
int aeron_async_add_counter_poll(aeron_counter_t **counter, aeron_async_add_counter_t *async);

int64_t aeron_publication_offer(
    aeron_publication_t *publication, const uint8_t *buffer, size_t length,
    aeron_reserved_value_supplier_t reserved_value_supplier, void *clientd);
int64_t aeron_publication_channel_status(aeron_publication_t *publication);
bool aeron_publication_is_closed(aeron_publication_t *publication);
bool aeron_publication_is_connected(aeron_publication_t *publication);
int aeron_publication_constants(aeron_publication_t *publication, aeron_publication_constants_t *constants);
int64_t aeron_publication_position(aeron_publication_t *publication);
int64_t aeron_publication_position_limit(aeron_publication_t *publication);
int aeron_publication_close(
    aeron_publication_t *publication, aeron_notification_t on_close_complete, void *on_close_complete_clientd);

int64_t aeron_exclusive_publication_offer(
    aeron_exclusive_publication_t *publication, const uint8_t *buffer, size_t length,
    aeron_reserved_value_supplier_t reserved_value_supplier, void *clientd);
int64_t aeron_exclusive_publication_append_padding(aeron_exclusive_publication_t *publication, size_t length);
int64_t aeron_exclusive_publication_offer_block(
    aeron_exclusive_publication_t *publication, const uint8_t *buffer, size_t length);
int64_t aeron_exclusive_publication_channel_status(aeron_exclusive_publication_t *publication);
int aeron_exclusive_publication_constants(
    aeron_exclusive_publication_t *publication, aeron_publication_constants_t *constants);
int64_t aeron_exclusive_publication_position(aeron_exclusive_publication_t *publication);
int64_t aeron_exclusive_publication_position_limit(aeron_exclusive_publication_t *publication);
int aeron_exclusive_publication_close(
    aeron_exclusive_publication_t *publication, aeron_notification_t on_close_complete,
    void *on_close_complete_clientd);
int aeron_exclusive_publication_revoke(
    aeron_exclusive_publication_t *publication, aeron_notification_t on_close_complete,
    void *on_close_complete_clientd);
bool aeron_exclusive_publication_is_closed(aeron_exclusive_publication_t *publication);
bool aeron_exclusive_publication_is_connected(aeron_exclusive_publication_t *publication);

int aeron_subscription_poll(
    aeron_subscription_t *subscription, aeron_fragment_handler_t handler, void *clientd, size_t fragment_limit);
int aeron_subscription_controlled_poll(
    aeron_subscription_t *subscription, aeron_controlled_fragment_handler_t handler, void *clientd,
    size_t fragment_limit);
long aeron_subscription_block_poll(
    aeron_subscription_t *subscription, aeron_block_handler_t handler, void *clientd, size_t block_length_limit);
bool aeron_subscription_is_connected(aeron_subscription_t *subscription);
int aeron_subscription_constants(aeron_subscription_t *subscription, aeron_subscription_constants_t *constants);
int aeron_subscription_image_count(aeron_subscription_t *subscription);
aeron_image_t *aeron_subscription_image_by_session_id(aeron_subscription_t *subscription, int32_t session_id);
aeron_image_t *aeron_subscription_image_at_index(aeron_subscription_t *subscription, size_t index);
int aeron_subscription_image_retain(aeron_subscription_t *subscription, aeron_image_t *image);
int aeron_subscription_image_release(aeron_subscription_t *subscription, aeron_image_t *image);
bool aeron_subscription_is_closed(aeron_subscription_t *subscription);
int64_t aeron_subscription_channel_status(aeron_subscription_t *subscription);
int aeron_subscription_close(
    aeron_subscription_t *subscription, aeron_notification_t on_close_complete, void *on_close_complete_clientd);
int aeron_subscription_try_resolve_channel_endpoint_port(
    aeron_subscription_t *subscription, char *uri, size_t uri_len);

int aeron_image_constants(aeron_image_t *image, aeron_image_constants_t *constants);
int64_t aeron_image_position(aeron_image_t *image);
bool aeron_image_is_end_of_stream(aeron_image_t *image);
int64_t aeron_image_end_of_stream_position(aeron_image_t *image);
int aeron_image_active_transport_count(aeron_image_t *image);
bool aeron_image_is_publication_revoked(aeron_image_t *image);
int aeron_image_poll(aeron_image_t *image, aeron_fragment_handler_t handler, void *clientd, size_t fragment_limit);
int aeron_image_controlled_poll(
    aeron_image_t *image, aeron_controlled_fragment_handler_t handler, void *clientd, size_t fragment_limit);
int aeron_image_block_poll(
    aeron_image_t *image, aeron_block_handler_t handler, void *clientd, size_t block_length_limit);
bool aeron_image_is_closed(aeron_image_t *image);
/* Exported by the 1.53 build (not declared in aeronc.h): unconditional reference count release / inspection. */
int aeron_image_release(aeron_image_t *image);
int64_t aeron_image_incr_refcnt(aeron_image_t *image);
int64_t aeron_image_refcnt_acquire(aeron_image_t *image);

int aeron_image_fragment_assembler_create(
    aeron_image_fragment_assembler_t **assembler, aeron_fragment_handler_t delegate, void *delegate_clientd);
int aeron_image_fragment_assembler_delete(aeron_image_fragment_assembler_t *assembler);
void aeron_image_fragment_assembler_handler(
    void *clientd, const uint8_t *buffer, size_t length, aeron_header_t *header);
int aeron_image_controlled_fragment_assembler_create(
    aeron_image_controlled_fragment_assembler_t **assembler, aeron_controlled_fragment_handler_t delegate,
    void *delegate_clientd);
int aeron_image_controlled_fragment_assembler_delete(aeron_image_controlled_fragment_assembler_t *assembler);
aeron_controlled_fragment_handler_action_t aeron_image_controlled_fragment_assembler_handler(
    void *clientd, const uint8_t *buffer, size_t length, aeron_header_t *header);
int aeron_fragment_assembler_create(
    aeron_fragment_assembler_t **assembler, aeron_fragment_handler_t delegate, void *delegate_clientd);
int aeron_fragment_assembler_delete(aeron_fragment_assembler_t *assembler);
void aeron_fragment_assembler_handler(void *clientd, const uint8_t *buffer, size_t length, aeron_header_t *header);
int aeron_controlled_fragment_assembler_create(
    aeron_controlled_fragment_assembler_t **assembler, aeron_controlled_fragment_handler_t delegate,
    void *delegate_clientd);
int aeron_controlled_fragment_assembler_delete(aeron_controlled_fragment_assembler_t *assembler);
aeron_controlled_fragment_handler_action_t aeron_controlled_fragment_assembler_handler(
    void *clientd, const uint8_t *buffer, size_t length, aeron_header_t *header);

int64_t aeron_header_position(aeron_header_t *header);
size_t aeron_header_position_bits_to_shift(aeron_header_t *header);
int32_t aeron_header_next_term_offset(aeron_header_t *header);
void *aeron_header_context(aeron_header_t *header);

int64_t *aeron_counter_addr(aeron_counter_t *counter);
int aeron_counter_constants(aeron_counter_t *counter, aeron_counter_constants_t *constants);
int aeron_counter_close(
    aeron_counter_t *counter, aeron_notification_t on_close_complete, void *on_close_complete_clientd);
bool aeron_counter_is_closed(aeron_counter_t *counter);
void aeron_counter_set_release(volatile int64_t *addr, int64_t value);
int64_t aeron_counter_get_acquire(volatile int64_t *addr);

void aeron_counters_reader_foreach_counter(
    aeron_counters_reader_t *counters_reader, aeron_counters_reader_foreach_counter_func_t func, void *clientd);
int32_t aeron_counters_reader_find_by_type_id_and_registration_id(
    aeron_counters_reader_t *counters_reader, int32_t type_id, int64_t registration_id);
int32_t aeron_counters_reader_max_counter_id(aeron_counters_reader_t *reader);
int64_t *aeron_counters_reader_addr(aeron_counters_reader_t *counters_reader, int32_t counter_id);
int aeron_counters_reader_counter_registration_id(
    aeron_counters_reader_t *counters_reader, int32_t counter_id, int64_t *registration_id);
int aeron_counters_reader_counter_owner_id(
    aeron_counters_reader_t *counters_reader, int32_t counter_id, int64_t *owner_id);
int aeron_counters_reader_counter_reference_id(
    aeron_counters_reader_t *counters_reader, int32_t counter_id, int64_t *reference_id);
int aeron_counters_reader_counter_state(aeron_counters_reader_t *counters_reader, int32_t counter_id, int32_t *state);
int aeron_counters_reader_counter_type_id(
    aeron_counters_reader_t *counters_reader, int32_t counter_id, int32_t *type_id);
int aeron_counters_reader_metadata_key(
    aeron_counters_reader_t *counters_reader, int32_t counter_id, uint8_t **key_p);
int aeron_counters_reader_counter_label(
    aeron_counters_reader_t *counters_reader, int32_t counter_id, char *buffer, size_t buffer_length);

int aeron_errcode(void);
const char *aeron_errmsg(void);
const char *aeron_version_full(void);
int aeron_version_major(void);
int aeron_version_minor(void);
int aeron_version_patch(void);
"""

# Structs declared under `#pragma pack(4)` in aeronc.h: the frame is naturally packed (32 bytes, equal to the data
# header); the values struct puts `size_t position_bits_to_shift` at offset 36, which only pack(4) reproduces.
_CDEF_PACK4 = """
struct aeron_header_values_frame_stct
{
    int32_t frame_length;
    int8_t version;
    uint8_t flags;
    int16_t type;
    int32_t term_offset;
    int32_t session_id;
    int32_t stream_id;
    int32_t term_id;
    int64_t reserved_value;
};
typedef struct aeron_header_values_frame_stct aeron_header_values_frame_t;

typedef struct aeron_header_values_stct
{
    aeron_header_values_frame_t frame;
    int32_t initial_term_id;
    size_t position_bits_to_shift;
}
aeron_header_values_t;

int aeron_header_values(aeron_header_t *header, aeron_header_values_t *values);
"""

ffi = cffi.FFI()
ffi.cdef(_CDEF)
ffi.cdef(_CDEF_PACK4, pack=4)

_lib: Any = None
_lib_lock = threading.Lock()


class NativeAeronError(Exception):
    """An Aeron C API call failed; carries `aeron_errcode()` and the `aeron_errmsg()` text of the failing thread."""

    def __init__(self, message: str, errcode: int = 0) -> None:
        super().__init__(message)
        self.errcode = errcode


def extension_path() -> str:
    """Path of pyaeron's extension module, the shared object whose exports we bind to."""
    import pyaeron._pyaeron as ext  # imported first so the .so (and its C client) is loaded exactly once

    return str(ext.__file__)


def get_lib() -> Any:
    """Open (once) and return the cffi `lib` over pyaeron's extension module."""
    global _lib
    if _lib is None:
        with _lib_lock:
            if _lib is None:
                _lib = ffi.dlopen(extension_path())
    return _lib


def last_error(context: str) -> NativeAeronError:
    """Build a NativeAeronError for the calling thread's last Aeron error, prefixed with what we were doing.

    Must be called on the thread that made the failing call: aeron_errmsg()/aeron_errcode() are thread-local.
    """
    lib = get_lib()
    code = int(lib.aeron_errcode())
    raw = lib.aeron_errmsg()
    detail = ffi.string(raw).decode("utf-8", "replace").strip() if raw != ffi.NULL else ""
    message = f"{context}: {detail}" if detail else f"{context}: (no Aeron error message)"
    return NativeAeronError(f"{message} (errcode={code})", code)


def version() -> str:
    """Full version string of the Aeron C client we are bound to."""
    return str(ffi.string(get_lib().aeron_version_full()).decode())


def __getattr__(name: str) -> Any:
    """Module attribute `lib` opens the library on first access (PEP 562), keeping `from .ffi import lib` lazy-safe."""
    if name == "lib":
        return get_lib()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
