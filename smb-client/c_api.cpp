// The plain C API (include/smb/smb.h): exceptions become error codes plus a
// per-thread message.
#include <smb/client.hpp>
#include <smb/smb.h>

#include <cstring>
#include <memory>
#include <string>

struct smb_client {
  smb::Client client;
};
struct smb_buffer {
  smb::Buffer buffer;
};
struct smb_request {
  smb::Request request;
};
struct smb_lock {
  smb::Lock lock;
};
struct smb_registration {
  smb::MemoryRegistration registration;
};

static_assert(SMB_EINVAL == static_cast<int>(smb::Errc::invalid_argument) &&
              SMB_ENOSPC == static_cast<int>(smb::Errc::no_space) &&
              SMB_EINTERNAL == static_cast<int>(smb::Errc::internal) &&
              SMB_ELOST == static_cast<int>(smb::Errc::data_lost) &&
              SMB_EPERM == static_cast<int>(smb::Errc::permission_denied) &&
              SMB_EBUSY == static_cast<int>(smb::Errc::busy) &&
              SMB_EORDER == static_cast<int>(smb::Errc::out_of_order));
// smb.h's op and dtype numbers are the C++ enums' (and the wire's).
static_assert(SMB_OP_ACCUMULATE == static_cast<int>(smb::VectorOp::accumulate) &&
              SMB_OP_AXPY == static_cast<int>(smb::VectorOp::axpy) &&
              SMB_OP_SCALE == static_cast<int>(smb::VectorOp::scale) &&
              SMB_OP_COPY == static_cast<int>(smb::VectorOp::copy) &&
              SMB_OP_MIN == static_cast<int>(smb::VectorOp::min) &&
              SMB_OP_MAX == static_cast<int>(smb::VectorOp::max) &&
              SMB_OP_PRODUCT == static_cast<int>(smb::VectorOp::product));
static_assert(SMB_F32 == static_cast<int>(smb::DType::f32) && SMB_F64 == static_cast<int>(smb::DType::f64) &&
              SMB_F16 == static_cast<int>(smb::DType::f16) && SMB_BF16 == static_cast<int>(smb::DType::bf16) &&
              SMB_U8 == static_cast<int>(smb::DType::u8) && SMB_I8 == static_cast<int>(smb::DType::i8) &&
              SMB_I16 == static_cast<int>(smb::DType::i16) && SMB_I32 == static_cast<int>(smb::DType::i32) &&
              SMB_I64 == static_cast<int>(smb::DType::i64));

namespace {
thread_local std::string last_error;

// What a caller passed must be there: a NULL is SMB_EINVAL, naming the argument.
template <class T>
T& need(T* p, const char* what) {
  if (p == nullptr) throw smb::Error(smb::Errc::invalid_argument, std::string(what) + " is NULL");
  return *p;
}
const char* text(const char* p, const char* what) { return &need(p, what); }
// Data of `n` bytes: NULL only when n is 0.
template <class T>
T* data_of(T* p, size_t n, const char* what) {
  if (p == nullptr && n != 0) throw smb::Error(smb::Errc::invalid_argument, std::string(what) + " is NULL");
  return p;
}

template <class F>
int guarded(F&& f) {
  try {
    f();
    last_error.clear();
    return 0;
  } catch (const smb::Error& e) {
    last_error = e.what();
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    last_error = e.what();
    return static_cast<int>(smb::Errc::internal);
  } catch (...) {
    last_error = "unknown failure";
    return static_cast<int>(smb::Errc::internal);
  }
}

std::span<const std::byte> in(const void* p, size_t n) { return {static_cast<const std::byte*>(p), n}; }
std::span<std::byte> out(void* p, size_t n) { return {static_cast<std::byte*>(p), n}; }

// Checked conversions of the C API's plain ints to the C++ enums.
smb::VectorOp vector_op(int op) {
  if (op < SMB_OP_ACCUMULATE || op > SMB_OP_PRODUCT)
    throw smb::Error(smb::Errc::invalid_argument, "unknown vector op " + std::to_string(op));
  return static_cast<smb::VectorOp>(op);
}
smb::DType dtype(int type) {
  if (type < SMB_F32 || type > SMB_I64)
    throw smb::Error(smb::Errc::invalid_argument, "unknown dtype " + std::to_string(type));
  return static_cast<smb::DType>(type);
}
}  // namespace

extern "C" {

int smb_client_connect(const char* servers, uint32_t timeout_ms, smb_client** result) {
  return guarded([&] {
    smb::ClientOptions options;
    if (servers != nullptr) options.servers = smb::parse_server_list(servers);
    if (timeout_ms != 0) options.timeout = std::chrono::milliseconds(timeout_ms);
    need(result, "smb_client_connect: out");
    *result = std::make_unique<smb_client>(smb_client{smb::Client(std::move(options))}).release();
  });
}

void smb_client_free(smb_client* client) { std::unique_ptr<smb_client> owned(client); }

int smb_buffer_create(smb_client* client, const char* name, uint64_t size, uint64_t stripe_unit, smb_buffer** result) {
  return smb_buffer_create_replicated(client, name, size, stripe_unit, 1, result);
}

int smb_buffer_create_replicated(smb_client* client, const char* name, uint64_t size, uint64_t stripe_unit,
                                 uint32_t replicas, smb_buffer** result) {
  return guarded([&] {
    smb::BufferOptions options;
    if (stripe_unit != 0) options.stripe_unit = stripe_unit;
    if (replicas != 0) options.replicas = replicas;
    auto& c = need(client, "smb_buffer_create: client");
    auto& out = need(result, "smb_buffer_create: out");
    out = std::make_unique<smb_buffer>(smb_buffer{c.client.create(text(name, "smb_buffer_create: name"), size, options)})
              .release();
  });
}

int smb_buffer_open(smb_client* client, const char* name, smb_buffer** result) {
  return guarded([&] {
    auto& c = need(client, "smb_buffer_open: client");
    auto& out = need(result, "smb_buffer_open: out");
    out = std::make_unique<smb_buffer>(smb_buffer{c.client.open(text(name, "smb_buffer_open: name"))}).release();
  });
}

int smb_buffer_destroy(smb_client* client, const char* name) {
  return guarded([&] { need(client, "smb_buffer_destroy: client").client.destroy(text(name, "smb_buffer_destroy: name")); });
}

int smb_buffer_save(smb_client* client, const char* name, const char* path) {
  return guarded([&] {
    need(client, "smb_buffer_save: client").client.save(text(name, "smb_buffer_save: name"), text(path, "smb_buffer_save: path"));
  });
}

int smb_buffer_load(smb_client* client, const char* path, const char* name, smb_buffer** result) {
  return guarded([&] {
    auto& c = need(client, "smb_buffer_load: client");
    auto& out = need(result, "smb_buffer_load: out");
    const std::string target = name == nullptr ? std::string() : std::string(name);
    out = std::make_unique<smb_buffer>(smb_buffer{c.client.load(text(path, "smb_buffer_load: path"), target)}).release();
  });
}

void smb_buffer_close(smb_buffer* buffer) { std::unique_ptr<smb_buffer> owned(buffer); }
uint64_t smb_buffer_size(const smb_buffer* buffer) { return buffer == nullptr ? 0 : buffer->buffer.size(); }

int smb_write(smb_buffer* b, uint64_t offset, const void* data, size_t bytes) {
  return guarded([&] { need(b, "smb_write: buffer").buffer.write(offset, in(data_of(data, bytes, "smb_write: data"), bytes)); });
}
int smb_read(smb_buffer* b, uint64_t offset, void* dst, size_t bytes) {
  return guarded([&] { need(b, "smb_read: buffer").buffer.read(offset, out(data_of(dst, bytes, "smb_read: out"), bytes)); });
}
int smb_write_async(smb_buffer* b, uint64_t offset, const void* data, size_t bytes, smb_request** result) {
  return guarded([&] {
    auto& buffer = need(b, "smb_write_async: buffer");
    auto& request = need(result, "smb_write_async: out");
    request = std::make_unique<smb_request>(
                  smb_request{buffer.buffer.write_async(offset, in(data_of(data, bytes, "smb_write_async: data"), bytes))})
                  .release();
  });
}
int smb_read_async(smb_buffer* b, uint64_t offset, void* dst, size_t bytes, smb_request** result) {
  return guarded([&] {
    auto& buffer = need(b, "smb_read_async: buffer");
    auto& request = need(result, "smb_read_async: out");
    request = std::make_unique<smb_request>(
                  smb_request{buffer.buffer.read_async(offset, out(data_of(dst, bytes, "smb_read_async: out"), bytes))})
                  .release();
  });
}
int smb_request_wait(smb_request* request) {
  std::unique_ptr<smb_request> owned(request);
  return guarded([&] { need(owned.get(), "smb_request_wait: request").request.wait(); });
}
int smb_fetch_add(smb_buffer* b, uint64_t offset, uint64_t value, uint64_t* old_value) {
  return guarded([&] {
    auto& buffer = need(b, "smb_fetch_add: buffer");
    need(old_value, "smb_fetch_add: old_value") = buffer.buffer.fetch_add(offset, value);
  });
}
int smb_compare_swap(smb_buffer* b, uint64_t offset, uint64_t expected, uint64_t desired, uint64_t* old_value) {
  return guarded([&] {
    auto& buffer = need(b, "smb_compare_swap: buffer");
    need(old_value, "smb_compare_swap: old_value") = buffer.buffer.compare_swap(offset, expected, desired);
  });
}
int smb_apply(smb_buffer* b, smb_vector_op op, smb_dtype type, uint64_t offset, uint64_t count, double alpha,
              const void* x) {
  return guarded([&] {
    const auto o = vector_op(op);
    const auto t = dtype(type);
    const size_t bytes = x == nullptr ? 0 : static_cast<size_t>(count * smb::element_size(t));
    need(b, "smb_apply: buffer").buffer.apply(o, t, offset, count, alpha, in(x, bytes));
  });
}
int smb_apply_from(smb_buffer* b, smb_vector_op op, smb_dtype type, uint64_t offset, uint64_t count, double alpha,
                   const smb_buffer* source, uint64_t source_offset) {
  return guarded([&] {
    need(b, "smb_apply_from: buffer")
        .buffer.apply_from(vector_op(op), dtype(type), offset, count, alpha, need(source, "smb_apply_from: source").buffer,
                           source_offset);
  });
}
int smb_buffer_version(smb_buffer* b, uint64_t* version) {
  return guarded([&] {
    auto& buffer = need(b, "smb_buffer_version: buffer");
    need(version, "smb_buffer_version: version") = buffer.buffer.version();
  });
}
int smb_wait_version(smb_buffer* b, uint64_t version, uint32_t timeout_ms, uint64_t* reached) {
  return guarded([&] {
    auto& buffer = need(b, "smb_wait_version: buffer");
    need(reached, "smb_wait_version: reached") = buffer.buffer.wait_version(version, std::chrono::milliseconds(timeout_ms));
  });
}
int smb_lock_acquire(smb_client* client, const char* name, uint32_t lease_ms, uint32_t timeout_ms, smb_lock** result) {
  return guarded([&] {
    smb::LockOptions options;
    if (lease_ms != 0) options.lease = std::chrono::milliseconds(lease_ms);
    if (timeout_ms != 0) options.timeout = std::chrono::milliseconds(timeout_ms);
    auto& c = need(client, "smb_lock_acquire: client");
    auto& out = need(result, "smb_lock_acquire: out");
    out = std::make_unique<smb_lock>(smb_lock{c.client.lock(text(name, "smb_lock_acquire: name"), options)}).release();
  });
}
int smb_lock_release(smb_lock* lock) {
  std::unique_ptr<smb_lock> owned(lock);
  return guarded([&] { need(owned.get(), "smb_lock_release: lock").lock.unlock(); });
}
int smb_barrier(smb_client* client, const char* name, uint32_t parties, uint32_t timeout_ms) {
  return guarded([&] {
    need(client, "smb_barrier: client")
        .client.barrier(text(name, "smb_barrier: name"), parties,
                        std::chrono::milliseconds(timeout_ms == 0 ? 120000 : timeout_ms));
  });
}
int smb_register_memory(smb_client* client, void* base, size_t bytes, smb_registration** out) {
  return guarded([&] {
    auto& c = need(client, "smb_register_memory: client");
    auto& result = need(out, "smb_register_memory: out");
    auto registration =
        c.client.register_memory({static_cast<std::byte*>(data_of(base, bytes, "smb_register_memory: base")), bytes});
    result = std::make_unique<smb_registration>(smb_registration{std::move(registration)}).release();
  });
}
void smb_unregister_memory(smb_registration* registration) { std::unique_ptr<smb_registration> owned(registration); }
const char* smb_last_error(void) { return last_error.c_str(); }
const char* smb_errc_name(int code) {
  if (code < SMB_OK || code > SMB_EORDER) return "unknown error";
  return smb::errc_name(static_cast<smb::Errc>(code));
}

}  // extern "C"
