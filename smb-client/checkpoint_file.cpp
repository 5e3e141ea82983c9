#include "checkpoint_file.hpp"

#include "protocol/little_endian.hpp"
#include "protocol/messages.hpp"
#include "util/parse.hpp"

#include <xxhash.h>

#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <vector>

namespace smb::checkpoint {
namespace {

constexpr std::array<char, 8> kMagic = {'S', 'M', 'B', 'C', 'K', 'P', 'T', '1'};
constexpr std::array<char, 8> kEndMagic = {'S', 'M', 'B', 'C', 'K', 'E', 'N', 'D'};
constexpr std::size_t kFixedHeader = 8 + 4 + 4 + 8 + 8 + 8;
constexpr std::size_t kTrailer = 8 + 8;

using File = std::unique_ptr<std::FILE, int (*)(std::FILE*)>;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw Error(Errc::invalid_argument, "checkpoint " + util::quoted(path) + ": " + what);
}
std::string os_error() { return std::strerror(errno); }

std::vector<std::byte> header_bytes(const CheckpointInfo& info) {
  std::vector<std::byte> out(kFixedHeader + info.name.size());
  auto* b = reinterpret_cast<std::uint8_t*>(out.data());
  std::memcpy(b, kMagic.data(), kMagic.size());
  protocol::put_le(b + 8, kFormat, 4);
  protocol::put_le(b + 12, info.name.size(), 4);
  protocol::put_le(b + 16, info.size, 8);
  protocol::put_le(b + 24, info.stripe_unit, 8);
  protocol::put_le(b + 32, info.version, 8);
  std::memcpy(b + kFixedHeader, info.name.data(), info.name.size());
  return out;
}

}  // namespace

// A running XXH64 of a checkpoint's header and data.
struct Hasher {
  std::unique_ptr<XXH64_state_t, XXH_errorcode (*)(XXH64_state_t*)> state{XXH64_createState(), XXH64_freeState};
  Hasher() { XXH64_reset(state.get(), kChecksumSeed); }
  void add(std::span<const std::byte> bytes) { XXH64_update(state.get(), bytes.data(), bytes.size()); }
  std::uint64_t digest() const { return XXH64_digest(state.get()); }
};

struct FileWriter::Hash : Hasher {};
struct FileReader::Hash : Hasher {};

FileWriter::FileWriter(std::string path, const CheckpointInfo& info)
    : path_(std::move(path)), partial_(path_ + ".partial"), file_(nullptr, std::fclose),
      hash_(std::make_unique<Hash>()), expected_(info.size) {
  protocol::validate_name(info.name);
  file_.reset(std::fopen(partial_.c_str(), "wb"));
  if (!file_) fail(path_, "cannot create " + partial_ + ": " + os_error());
  put(header_bytes(info));
}

FileWriter::~FileWriter() {
  if (finished_) return;
  file_.reset();
  ::unlink(partial_.c_str());  // a checkpoint is whole or absent
}

void FileWriter::put(std::span<const std::byte> bytes) {
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), file_.get()) != bytes.size())
    fail(path_, "writing " + partial_ + ": " + os_error());
  hash_->add(bytes);
}

void FileWriter::append(std::span<const std::byte> data) {
  if (data.size() > expected_ - written_) fail(path_, "more data than the header's size (a bug in the caller)");
  put(data);
  written_ += data.size();
}

std::uint64_t FileWriter::finish() {
  if (written_ != expected_)
    fail(path_, "only " + std::to_string(written_) + " of " + std::to_string(expected_) + " bytes were written");
  const std::uint64_t checksum = hash_->digest();
  std::array<std::uint8_t, kTrailer> trailer{};
  protocol::put_le(trailer.data(), checksum, 8);
  std::memcpy(trailer.data() + 8, kEndMagic.data(), kEndMagic.size());
  if (std::fwrite(trailer.data(), 1, trailer.size(), file_.get()) != trailer.size() ||
      std::fflush(file_.get()) != 0 || ::fsync(::fileno(file_.get())) != 0)
    fail(path_, "writing " + partial_ + ": " + os_error());
  if (std::fclose(file_.release()) != 0) fail(path_, "closing " + partial_ + ": " + os_error());
  if (std::rename(partial_.c_str(), path_.c_str()) != 0) fail(path_, "renaming " + partial_ + ": " + os_error());
  finished_ = true;
  return checksum;
}

FileReader::FileReader(std::string path) : path_(std::move(path)), file_(nullptr, std::fclose) {
  file_.reset(std::fopen(path_.c_str(), "rb"));
  if (!file_) fail(path_, "cannot open: " + os_error());
  if (std::fseek(file_.get(), 0, SEEK_END) != 0) fail(path_, "cannot seek: " + os_error());
  const auto length = static_cast<std::uint64_t>(std::ftell(file_.get()));
  std::rewind(file_.get());

  std::array<std::uint8_t, kFixedHeader> fixed{};
  if (length < kFixedHeader + kTrailer || std::fread(fixed.data(), 1, fixed.size(), file_.get()) != fixed.size())
    fail(path_, "truncated: " + std::to_string(length) + " bytes, shorter than any checkpoint");
  if (std::memcmp(fixed.data(), kMagic.data(), kMagic.size()) != 0) fail(path_, "not an smb checkpoint (no SMBCKPT1 header)");
  if (const auto format = protocol::get_le(fixed.data() + 8, 4); format != kFormat)
    fail(path_, "format " + std::to_string(format) + ", this libsmb reads format " + std::to_string(kFormat));
  const auto name_length = protocol::get_le(fixed.data() + 12, 4);
  info_.size = protocol::get_le(fixed.data() + 16, 8);
  info_.stripe_unit = protocol::get_le(fixed.data() + 24, 8);
  info_.version = protocol::get_le(fixed.data() + 32, 8);
  if (name_length == 0 || name_length > protocol::kMaxNameLength) fail(path_, "damaged header (name length)");
  const std::uint64_t data_start = kFixedHeader + name_length;
  if (info_.size > length || length - kTrailer - data_start != info_.size)
    fail(path_, "truncated or damaged: " + std::to_string(length) + " bytes, its header promises " +
                    (info_.size > length ? "more" : std::to_string(data_start + info_.size + kTrailer)));
  info_.name.resize(name_length);
  if (std::fread(info_.name.data(), 1, name_length, file_.get()) != name_length) fail(path_, "cannot read: " + os_error());
  try {
    protocol::validate_name(info_.name);
  } catch (const Error&) {
    fail(path_, "damaged header (buffer name)");
  }

  // The whole file is checked before anyone uses a byte of it.
  Hasher whole;
  const auto header = header_bytes(info_);
  whole.add(header);
  std::vector<std::byte> chunk(1 << 20);
  for (std::uint64_t left = info_.size; left > 0;) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(left, chunk.size()));
    if (std::fread(chunk.data(), 1, n, file_.get()) != n) fail(path_, "cannot read: " + os_error());
    whole.add({chunk.data(), n});
    left -= n;
  }
  std::array<std::uint8_t, kTrailer> trailer{};
  if (std::fread(trailer.data(), 1, trailer.size(), file_.get()) != trailer.size()) fail(path_, "cannot read: " + os_error());
  if (std::memcmp(trailer.data() + 8, kEndMagic.data(), kEndMagic.size()) != 0) fail(path_, "damaged trailer");
  info_.checksum = protocol::get_le(trailer.data(), 8);
  if (const auto computed = whole.digest(); computed != info_.checksum)
    fail(path_, "checksum mismatch (stored " + std::to_string(info_.checksum) + ", computed " +
                    std::to_string(computed) + "): the file is damaged");
  if (std::fseek(file_.get(), static_cast<long>(data_start), SEEK_SET) != 0) fail(path_, "cannot seek: " + os_error());
  left_ = info_.size;
  again_ = std::make_unique<Hash>();
  again_->add(header);
}

FileReader::~FileReader() = default;

std::size_t FileReader::read(std::span<std::byte> out) {
  const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(left_, out.size()));
  if (n > 0 && std::fread(out.data(), 1, n, file_.get()) != n)
    fail(path_, "cannot read (did the file change while it was loaded?): " + os_error());
  again_->add(out.first(n));
  left_ -= n;
  return n;
}

void FileReader::finish() {
  if (left_ != 0 || again_->digest() != info_.checksum)
    fail(path_, "the file changed while it was loaded: what was loaded does not match its checksum");
}

}  // namespace smb::checkpoint
