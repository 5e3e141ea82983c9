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

namespace {
thread_local std::string last_error;

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
  }
}

std::span<const std::byte> in(const void* p, size_t n) { return {static_cast<const std::byte*>(p), n}; }
std::span<std::byte> out(void* p, size_t n) { return {static_cast<std::byte*>(p), n}; }

// Checked conversions of the C API's plain ints to the C++ enums.
smb::VectorOp vector_op(int op) {
  if (op < 1 || op > 4) throw smb::Error(smb::Errc::invalid_argument, "unknown vector op " + std::to_string(op));
  return static_cast<smb::VectorOp>(op);
}
smb::DType dtype(int type) {
  if (type < 1 || type > 4) throw smb::Error(smb::Errc::invalid_argument, "unknown dtype " + std::to_string(type));
  return static_cast<smb::DType>(type);
}
}  // namespace

extern "C" {

int smb_client_connect(const char* servers, uint32_t timeout_ms, smb_client** result) {
  return guarded([&] {
    smb::ClientOptions options;
    if (servers != nullptr) options.servers = smb::parse_server_list(servers);
    if (timeout_ms != 0) options.timeout = std::chrono::milliseconds(timeout_ms);
    *result = std::make_unique<smb_client>(smb_client{smb::Client(std::move(options))}).release();
  });
}

void smb_client_free(smb_client* client) { std::unique_ptr<smb_client> owned(client); }

int smb_buffer_create(smb_client* client, const char* name, uint64_t size, uint64_t stripe_unit, smb_buffer** result) {
  return guarded([&] {
    smb::BufferOptions options;
    if (stripe_unit != 0) options.stripe_unit = stripe_unit;
    *result = std::make_unique<smb_buffer>(smb_buffer{client->client.create(name, size, options)}).release();
  });
}

int smb_buffer_open(smb_client* client, const char* name, smb_buffer** result) {
  return guarded([&] { *result = std::make_unique<smb_buffer>(smb_buffer{client->client.open(name)}).release(); });
}

int smb_buffer_destroy(smb_client* client, const char* name) {
  return guarded([&] { client->client.destroy(name); });
}

void smb_buffer_close(smb_buffer* buffer) { std::unique_ptr<smb_buffer> owned(buffer); }
uint64_t smb_buffer_size(const smb_buffer* buffer) { return buffer->buffer.size(); }

int smb_write(smb_buffer* b, uint64_t offset, const void* data, size_t bytes) {
  return guarded([&] { b->buffer.write(offset, in(data, bytes)); });
}
int smb_read(smb_buffer* b, uint64_t offset, void* dst, size_t bytes) {
  return guarded([&] { b->buffer.read(offset, out(dst, bytes)); });
}
int smb_write_async(smb_buffer* b, uint64_t offset, const void* data, size_t bytes, smb_request** result) {
  return guarded([&] {
    *result = std::make_unique<smb_request>(smb_request{b->buffer.write_async(offset, in(data, bytes))}).release();
  });
}
int smb_read_async(smb_buffer* b, uint64_t offset, void* dst, size_t bytes, smb_request** result) {
  return guarded([&] {
    *result = std::make_unique<smb_request>(smb_request{b->buffer.read_async(offset, out(dst, bytes))}).release();
  });
}
int smb_request_wait(smb_request* request) {
  std::unique_ptr<smb_request> owned(request);
  return guarded([&] { owned->request.wait(); });
}
int smb_fetch_add(smb_buffer* b, uint64_t offset, uint64_t value, uint64_t* old_value) {
  return guarded([&] { *old_value = b->buffer.fetch_add(offset, value); });
}
int smb_compare_swap(smb_buffer* b, uint64_t offset, uint64_t expected, uint64_t desired, uint64_t* old_value) {
  return guarded([&] { *old_value = b->buffer.compare_swap(offset, expected, desired); });
}
int smb_apply(smb_buffer* b, int op, int type, uint64_t offset, uint64_t count, double alpha, const void* x) {
  return guarded([&] {
    const auto o = vector_op(op);
    const auto t = dtype(type);
    const size_t bytes = x == nullptr ? 0 : static_cast<size_t>(count * smb::element_size(t));
    b->buffer.apply(o, t, offset, count, alpha, in(x, bytes));
  });
}
int smb_apply_from(smb_buffer* b, int op, int type, uint64_t offset, uint64_t count, double alpha,
                   const smb_buffer* source, uint64_t source_offset) {
  return guarded([&] { b->buffer.apply_from(vector_op(op), dtype(type), offset, count, alpha, source->buffer, source_offset); });
}
int smb_buffer_version(smb_buffer* b, uint64_t* version) {
  return guarded([&] { *version = b->buffer.version(); });
}
int smb_wait_version(smb_buffer* b, uint64_t version, uint32_t timeout_ms, uint64_t* reached) {
  return guarded([&] { *reached = b->buffer.wait_version(version, std::chrono::milliseconds(timeout_ms)); });
}
int smb_lock_acquire(smb_client* client, const char* name, uint32_t lease_ms, uint32_t timeout_ms, smb_lock** result) {
  return guarded([&] {
    smb::LockOptions options;
    if (lease_ms != 0) options.lease = std::chrono::milliseconds(lease_ms);
    if (timeout_ms != 0) options.timeout = std::chrono::milliseconds(timeout_ms);
    *result = std::make_unique<smb_lock>(smb_lock{client->client.lock(name, options)}).release();
  });
}
int smb_lock_release(smb_lock* lock) {
  std::unique_ptr<smb_lock> owned(lock);
  return guarded([&] { owned->lock.unlock(); });
}
int smb_barrier(smb_client* client, const char* name, uint32_t parties, uint32_t timeout_ms) {
  return guarded([&] {
    client->client.barrier(name, parties, std::chrono::milliseconds(timeout_ms == 0 ? 120000 : timeout_ms));
  });
}
int smb_register_memory(smb_client* client, void* base, size_t bytes, smb_registration** out) {
  return guarded([&] {
    auto registration = client->client.register_memory({static_cast<std::byte*>(base), bytes});
    *out = std::make_unique<smb_registration>(smb_registration{std::move(registration)}).release();
  });
}
void smb_unregister_memory(smb_registration* registration) { std::unique_ptr<smb_registration> owned(registration); }
const char* smb_last_error(void) { return last_error.c_str(); }

}  // extern "C"
