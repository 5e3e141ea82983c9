#pragma once
// The buffer a benchmark runs on: a named one (opened, or created when
// missing) or a temporary one that is destroyed at the end unless kept.
#include "options.hpp"

#include <smb/client.hpp>

#include <string>

namespace smb::bench {

class BenchBuffer {
 public:
  BenchBuffer(Client& client, const Options& options);
  ~BenchBuffer();  // destroys a temporary buffer (unless --keep); never throws
  BenchBuffer(const BenchBuffer&) = delete;
  BenchBuffer& operator=(const BenchBuffer&) = delete;

  Buffer& buffer() noexcept { return buffer_; }
  Client& client() noexcept { return client_; }
  const std::string& name() const noexcept { return name_; }
  bool created() const noexcept { return created_; }      // by this process
  bool temporary() const noexcept { return temporary_; }

 private:
  Client& client_;
  std::string name_;
  bool temporary_ = false;
  bool keep_ = false;
  bool created_ = false;
  Buffer buffer_;
};

// "bench-<host>-<pid>-<nanoseconds>", restricted to valid name characters.
std::string temporary_name();

}  // namespace smb::bench
