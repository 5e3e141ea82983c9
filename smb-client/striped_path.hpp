#pragma once
// A buffer of one copy (data_path.hpp): each piece of a request goes to the
// one server that holds it, all servers at once; writes, reads and atomics
// are one-sided transport ops, vector ops are calls (vector_ops.cpp
// gathers them per server), versions come from that one copy.
#include "client_core.hpp"

namespace smb::client {

class StripedPath final : public DataPath {
 public:
  explicit StripedPath(detail::BufferCore& buffer) : buffer_(buffer) {}

  Request write(std::uint64_t offset, std::span<const std::byte> data) override;
  Request read(std::uint64_t offset, std::span<std::byte> out) override;
  std::uint64_t atomic(protocol::AtomicKind kind, std::uint64_t offset, std::uint64_t operand,
                       std::uint64_t desired) override;
  void apply(const VectorCallArgs& args, const VectorParts& parts, const Describe& what) override;
  std::uint32_t version_copy(std::uint32_t, const char*) override { return 0; }
  // One copy is never stale, held or repaired.
  void learn_stale(const std::vector<CopyRef>&) override {}
  void copy_reopened(std::uint32_t, std::uint32_t) override {}
  void adopted(const Layout&) override {}
  void close() override {}
  std::byte* mapped(std::uint64_t offset, std::uint64_t length) override;

 private:
  // Writes and reads: one transport op per piece, every server at once.
  template <class IssuePiece>
  Request transfer(const char* op, std::uint64_t offset, std::uint64_t length, IssuePiece issue);
  template <class Issue>
  Request one_piece(const char* op, std::uint64_t offset, std::uint64_t length, const protocol::StripePiece& piece,
                    transport::CompletionPtr completion, Issue issue);

  detail::BufferCore& buffer_;
};

}  // namespace smb::client
