"""The C declarations `ffi` binds to: the part of aeronc.h (Aeron 1.53) that `archive.native` uses.

This module is the source of truth; `aeron_cdefs_abi.py` beside it is generated from it by `emit()`, because
parsing these declarations with pycparser at import cost ~110 ms of every process's start (each Spark Python
worker's, each CLI command's), and the generated module loads them in ~1 ms. After changing a declaration, run
`.venv/bin/python -c "from aeron_archive_spark.archive.native import aeron_cdefs; aeron_cdefs.emit()"`;
`tests/unit/test_native_cdefs.py` fails until the generated module matches these declarations.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import cffi

CDEF = """
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
typedef struct aeron_client_registering_resource_stct aeron_async_destination_t;
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
int aeron_subscription_resolved_endpoint(aeron_subscription_t *subscription, const char *address, size_t address_len);
int aeron_subscription_async_add_destination(
    aeron_async_destination_t **async, aeron_t *client, aeron_subscription_t *subscription, const char *uri);
int aeron_subscription_async_remove_destination(
    aeron_async_destination_t **async, aeron_t *client, aeron_subscription_t *subscription, const char *uri);
int aeron_subscription_async_destination_poll(aeron_async_destination_t *async);

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
# header); the values struct puts `size_t position_bits_to_shift` at offset 36 (natural alignment would put it at
# 40). These structs have no padding under pack(4), so pack(1) gives the same layout, and cffi's generated ABI
# modules support only pack 0 or 1 (the unit test checks the offsets against aeronc.h's).
CDEF_PACK4 = """
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


# The generated module's name, in this package.
ABI_MODULE = "aeron_cdefs_abi"


def parsed() -> cffi.FFI:
    """An FFI with the declarations parsed now (pycparser): what the generated module is made from, and the
    fallback when it cannot be loaded. cffi's Python package (~4 ms to import) is needed only here."""
    import cffi

    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    ffi.cdef(CDEF_PACK4, pack=1)
    return ffi


def emit(path: Path | None = None) -> None:
    """Write the generated ABI module (cffi's out-of-line ABI mode: no C compiler, only the parsed types), by
    default beside this file."""
    # Resolved: the installed tree links to the source, and a write through the link would replace the link.
    path = path or Path(__file__).resolve().with_name(f"{ABI_MODULE}.py")
    ffi = parsed()
    ffi.set_source(f"{__package__}.{ABI_MODULE}", None)
    ffi.emit_python_code(str(path))
