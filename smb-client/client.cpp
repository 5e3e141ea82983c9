// The public C++ API (include/smb/client.hpp) over ClientCore / BufferCore.
#include "client_core.hpp"

#include <thread>

namespace smb {

namespace {
BufferCore& require(const std::shared_ptr<BufferCore>& core) {
  if (!core) throw Error(Errc::invalid_argument, "operation on a closed or empty smb::Buffer");
  return *core;
}
}  // namespace

Buffer::~Buffer() = default;
const std::string& Buffer::name() const { return require(core_).layout().name; }
std::uint64_t Buffer::size() const { return require(core_).layout().size; }
const Layout& Buffer::layout() const { return require(core_).layout(); }
void Buffer::write(std::uint64_t offset, std::span<const std::byte> data) { write_async(offset, data).wait(); }
void Buffer::read(std::uint64_t offset, std::span<std::byte> out) { read_async(offset, out).wait(); }
Request Buffer::write_async(std::uint64_t offset, std::span<const std::byte> data) {
  return require(core_).write(offset, data);
}
Request Buffer::read_async(std::uint64_t offset, std::span<std::byte> out) { return require(core_).read(offset, out); }
void Buffer::apply(VectorOp op, DType type, std::uint64_t offset, std::uint64_t count, double alpha,
                   std::span<const std::byte> x) {
  require(core_).apply(op, type, offset, count, alpha, x, nullptr, 0);
}
void Buffer::apply_from(VectorOp op, DType type, std::uint64_t offset, std::uint64_t count, double alpha,
                        const Buffer& source, std::uint64_t source_offset) {
  require(core_).apply(op, type, offset, count, alpha, {}, &require(source.core_), source_offset);
}
std::uint64_t Buffer::version() { return require(core_).version(); }
std::uint64_t Buffer::wait_version(std::uint64_t version, std::chrono::milliseconds timeout) {
  return require(core_).wait_version(version, timeout);
}
std::uint64_t Buffer::fetch_add(std::uint64_t offset, std::uint64_t value) {
  return require(core_).atomic(false, offset, value, 0);
}
std::uint64_t Buffer::compare_swap(std::uint64_t offset, std::uint64_t expected, std::uint64_t desired) {
  return require(core_).atomic(true, offset, expected, desired);
}
std::byte* Buffer::mapping(std::uint64_t offset, std::uint64_t length) {
  return require(core_).mapping(offset, length);
}
void Buffer::close() {
  if (core_) core_->close();
  core_.reset();
}

Client::Client(ClientOptions options) : core_(std::make_shared<ClientCore>(std::move(options))) {}
Client::~Client() = default;
Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;

Buffer Client::create(std::string_view name, std::uint64_t size, const BufferOptions& options) {
  return Buffer(core_->create(name, size, options));
}
Buffer Client::open(std::string_view name) { return Buffer(core_->open(name)); }

// Open first: a replicated buffer opens with a server down, where a create
// (which needs every server) would fail before it learnt the name is taken.
Buffer Client::open_or_create(std::string_view name, std::uint64_t size, const BufferOptions& options) {
  const auto deadline = std::chrono::steady_clock::now() + core_->timeout();
  for (;;) {
    try {
      return open(name);
    } catch (const Error& e) {
      // Nobody made it yet, or its creator has not committed it yet, or has just destroyed it.
      if (e.code() != Errc::not_found || std::chrono::steady_clock::now() > deadline) throw;
    }
    try {
      return create(name, size, options);
    } catch (const Error& e) {
      if (e.code() != Errc::already_exists) throw;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void Client::destroy(std::string_view name) { core_->destroy(name); }
std::vector<ServerStatus> Client::status() { return core_->status(); }
std::vector<ServerDiagnosis> Client::diagnose() { return core_->diagnose(); }
Lock Client::lock(std::string_view name, const LockOptions& options) { return core_->lock(name, options); }
void Client::barrier(std::string_view name, std::uint32_t parties, std::chrono::milliseconds timeout) {
  core_->barrier(name, parties, timeout);
}
std::vector<Layout> Client::list() { return core_->list(); }
Layout Client::info(std::string_view name) { return core_->info(name); }
std::vector<ShareState> Client::check(const Layout& layout) { return core_->check(layout); }
RepairReport Client::repair(std::string_view name) { return core_->repair(name); }
std::map<std::string, std::string> Client::unreachable_servers() const { return core_->unreachable_servers(); }
std::vector<std::string> Client::replace_server(std::string_view lost, std::string_view replacement) {
  return core_->replace_server(std::string(lost), std::string(replacement));
}
std::map<std::string, std::string> Client::replaced_servers() const {
  std::map<std::string, std::string> out;
  const auto map = core_->server_map();
  for (const auto& [slot, entry] : map.entries())
    if (entry.address != slot) out.emplace(slot, entry.address);
  return out;
}
const std::vector<std::string>& Client::servers() const { return core_->servers(); }
std::vector<std::string> Client::describe_paths() const { return core_->describe_paths(); }

MemoryRegistration Client::register_memory(std::span<std::byte> memory) {
  if (memory.empty()) throw Error(Errc::invalid_argument, "register_memory: empty span");
  auto state = std::make_shared<MemoryRegistration::State>();
  state->client = core_;
  state->handle = core_->transport().register_memory(memory.data(), memory.size());
  return MemoryRegistration(std::move(state));
}

MemoryRegistration::~MemoryRegistration() { unregister(); }

MemoryRegistration& MemoryRegistration::operator=(MemoryRegistration&& other) noexcept {
  if (this != &other) {
    unregister();
    state_ = std::move(other.state_);
  }
  return *this;
}

void MemoryRegistration::unregister() {
  if (!state_) return;
  auto state = std::move(state_);
  if (state->handle) state->client->transport().unregister_memory(*state->handle);
}

}  // namespace smb
