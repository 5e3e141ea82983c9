/** @file
 * Plain C API of libsmb, for FFI (Python ctypes/cffi, Caffe, other languages).
 * Every function returns SMB_OK (0) on success or a positive smb_errc;
 * smb_last_error() gives the message of the calling thread's last failure.
 * A NULL handle, name or out-pointer is SMB_EINVAL, never a crash. Handles
 * are opaque and must be released by their _close/_free (which accept NULL). */
#ifndef SMB_SMB_H
#define SMB_SMB_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Error codes (C++ users see them as smb::Errc). smb_errc_name() names one. */
enum smb_errc {
  SMB_OK = 0,
  SMB_EINVAL = 1,       /**< bad size, offset, alignment, name, option, NULL pointer */
  SMB_ERANGE = 2,       /**< offset/size beyond the buffer */
  SMB_ENOENT = 3,       /**< unknown buffer name */
  SMB_EEXIST = 4,       /**< name already taken */
  SMB_ENOSPC = 5,       /**< not enough free memory on a server, or a per-client limit */
  SMB_EUNREACHABLE = 6, /**< cannot connect to a server */
  SMB_EGONE = 7,        /**< a connected server went away */
  SMB_ETIMEDOUT = 8,    /**< a wait ran past its deadline */
  SMB_EPROTO = 9,       /**< malformed or unexpected message */
  SMB_ETRANSPORT = 10,  /**< the transport (UCX, verbs) reported a failure */
  SMB_EINTERNAL = 11,
  SMB_ELOST = 12,       /**< a server restarted empty: its stripes of a buffer are gone */
  SMB_EPERM = 13,       /**< the server wants a shared secret (SMB_AUTH_TOKEN_FILE) this client lacks or got wrong */
  SMB_EBUSY = 14,       /**< being repaired by another client, or a holder did not pause for a repair */
  SMB_EORDER = 15       /**< a replica's copy of an op could not take its place (libsmb handles it) */
};

typedef struct smb_client smb_client;
typedef struct smb_buffer smb_buffer;
typedef struct smb_request smb_request;

/** servers: "h1:p1,h2:p2" or NULL for $SMB_SERVERS. timeout_ms: 0 for default. */
int smb_client_connect(const char* servers, uint32_t timeout_ms, smb_client** out);
void smb_client_free(smb_client* client);

/** stripe_unit: 0 for the default (1 MiB). */
int smb_buffer_create(smb_client* client, const char* name, uint64_t size,
                      uint64_t stripe_unit, smb_buffer** out);
/** The same with `replicas` copies of each stripe, each on its own server
 * (smb::BufferOptions::replicas; 0 or 1: one copy). */
int smb_buffer_create_replicated(smb_client* client, const char* name, uint64_t size, uint64_t stripe_unit,
                                 uint32_t replicas, smb_buffer** out);
int smb_buffer_open(smb_client* client, const char* name, smb_buffer** out);
int smb_buffer_destroy(smb_client* client, const char* name);
/** Checkpoints (smb::Client::save / load): writes a consistent snapshot of
 * buffer `name` to the file `path`; restores one into a new buffer (`name`
 * NULL: the saved name) on the client's servers, verifying the file first
 * (a damaged file or a taken name: an error, nothing changed). */
int smb_buffer_save(smb_client* client, const char* name, const char* path);
int smb_buffer_load(smb_client* client, const char* path, const char* name, smb_buffer** out);
void smb_buffer_close(smb_buffer* buffer);
uint64_t smb_buffer_size(const smb_buffer* buffer);

int smb_write(smb_buffer* buffer, uint64_t offset, const void* data, size_t bytes);
int smb_read(smb_buffer* buffer, uint64_t offset, void* out, size_t bytes);
int smb_write_async(smb_buffer* buffer, uint64_t offset, const void* data, size_t bytes,
                    smb_request** out);
int smb_read_async(smb_buffer* buffer, uint64_t offset, void* out, size_t bytes,
                   smb_request** out_request);
/** Waits for and frees the request. */
int smb_request_wait(smb_request* request);

int smb_fetch_add(smb_buffer* buffer, uint64_t offset, uint64_t value, uint64_t* old_value);
int smb_compare_swap(smb_buffer* buffer, uint64_t offset, uint64_t expected, uint64_t desired,
                     uint64_t* old_value);

/** Server-side vector ops, done by the servers on y = the region of the
 * buffer, x = the source, a = alpha. */
enum smb_vector_op {
  SMB_OP_ACCUMULATE = 1, /**< y += x */
  SMB_OP_AXPY = 2,       /**< y = a*x + y */
  SMB_OP_SCALE = 3,      /**< y = a*y (no x) */
  SMB_OP_COPY = 4,       /**< y = x (a byte copy) */
  SMB_OP_MIN = 5,        /**< y = min(y, x); a NaN on either side gives NaN */
  SMB_OP_MAX = 6,        /**< y = max(y, x); a NaN on either side gives NaN */
  SMB_OP_PRODUCT = 7     /**< y = y*x */
};
/** Half types are computed in f32 and rounded once (to nearest even). Integer
 * types wrap around on overflow (two's complement, like numpy/torch); their
 * axpy and scale need an integral alpha within int64 (else SMB_EINVAL). */
enum smb_dtype {
  SMB_F32 = 1,
  SMB_F64 = 2,
  SMB_F16 = 3,
  SMB_BF16 = 4,
  SMB_U8 = 5,
  SMB_I8 = 6,
  SMB_I16 = 7,
  SMB_I32 = 8,
  SMB_I64 = 9
};
/** x holds count elements (NULL for scale). smb_apply_from takes x from
 * another buffer striped alike. An op or dtype outside its enum is SMB_EINVAL. */
int smb_apply(smb_buffer* buffer, enum smb_vector_op op, enum smb_dtype dtype, uint64_t offset, uint64_t count,
              double alpha, const void* x);
int smb_apply_from(smb_buffer* buffer, enum smb_vector_op op, enum smb_dtype dtype, uint64_t offset,
                   uint64_t count, double alpha, const smb_buffer* source, uint64_t source_offset);
int smb_buffer_version(smb_buffer* buffer, uint64_t* version);
int smb_wait_version(smb_buffer* buffer, uint64_t version, uint32_t timeout_ms, uint64_t* reached);

/** Coordination: a lease-held lock on a whole name, and a barrier. */
typedef struct smb_lock smb_lock;
int smb_lock_acquire(smb_client* client, const char* name, uint32_t lease_ms, uint32_t timeout_ms,
                     smb_lock** out);
int smb_lock_release(smb_lock* lock); /**< also frees it */
int smb_barrier(smb_client* client, const char* name, uint32_t parties, uint32_t timeout_ms);

/** Registers memory for zero-copy transfers (smb::Client::register_memory):
 * writes from and reads into it skip the transport's staging copy where the
 * transport can (native verbs). Unregister only once ops on it completed. */
typedef struct smb_registration smb_registration;
int smb_register_memory(smb_client* client, void* base, size_t bytes, smb_registration** out);
void smb_unregister_memory(smb_registration* registration); /**< also frees it */

const char* smb_last_error(void);
/** "invalid argument", "server gone", ...: what an smb_errc means ("unknown
 * error" for a value outside it). */
const char* smb_errc_name(int code);

#ifdef __cplusplus
}
#endif
#endif
