#include "bench_buffer.hpp"

#include <smb/error.hpp>

#include <unistd.h>

#include <chrono>
#include <iostream>
#include <thread>

namespace smb::bench {
namespace {

// Client::open_or_create, but telling whether this call created the buffer
// (fetch-add --verify zeroes only a fresh one). Open first, as it does: a
// replicated buffer opens with a server down, a create needs every server.
Buffer open_or_create(Client& client, const std::string& name, std::uint64_t size, const BufferOptions& options,
                      bool& created) {
  for (int attempt = 0;; ++attempt) {
    created = false;
    try {
      return client.open(name);
    } catch (const Error& e) {
      // Nobody made it yet, or its creator has not committed it yet, or just destroyed it.
      if (e.code() != Errc::not_found || attempt >= 100) throw;
    }
    try {
      created = true;
      return client.create(name, size, options);
    } catch (const Error& e) {
      if (e.code() != Errc::already_exists) throw;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

std::string temporary_name() {
  char host[64] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  std::string name = "bench-";
  for (const char* c = host; *c != '\0' && *c != '.'; ++c) {
    const bool ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '-';
    name += ok ? *c : '_';
  }
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return name + "-" + std::to_string(getpid()) + "-" +
         std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count());
}

BenchBuffer::BenchBuffer(Client& client, const Options& options)
    : client_(client), name_(options.name), temporary_(options.name.empty()), keep_(options.keep) {
  BufferOptions buffer_options;
  if (options.stripe_unit != 0) buffer_options.stripe_unit = options.stripe_unit;
  buffer_options.replicas = options.replicas;
  if (temporary_) {
    name_ = temporary_name();
    buffer_ = client.create(name_, options.size, buffer_options);
    created_ = true;
  } else if (options.op == Op::read) {
    // A read of a name nobody wrote is a mistake (a typo, another server
    // list): say so, and leave no buffer behind.
    try {
      buffer_ = client.open(name_);
    } catch (const Error& e) {
      if (e.code() != Errc::not_found) throw;
      throw Error(Errc::not_found, "no buffer '" + name_ + "' to read (" + e.what() +
                                       "): write it first (smb-bench --op write --keep --name " + name_ +
                                       "), or leave --name out to read a buffer of its own");
    }
    if (buffer_.size() < options.size)
      throw Error(Errc::out_of_range, "buffer '" + name_ + "' holds " + std::to_string(buffer_.size()) +
                                          " bytes, fewer than --size " + std::to_string(options.size));
  } else {
    buffer_ = open_or_create(client, name_, options.size, buffer_options, created_);
    if (buffer_.size() < options.size)
      throw Error(Errc::out_of_range, "buffer '" + name_ + "' holds " + std::to_string(buffer_.size()) +
                                          " bytes, fewer than --size " + std::to_string(options.size));
  }
}

BenchBuffer::~BenchBuffer() {
  if (!temporary_ || keep_) return;
  try {
    buffer_.close();
    client_.destroy(name_);
  } catch (const std::exception& e) {
    std::cerr << "smb-bench: could not destroy temporary buffer '" << name_ << "': " << e.what() << '\n';
  }
}

}  // namespace smb::bench
