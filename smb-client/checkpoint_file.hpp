#pragma once
// The checkpoint file: one buffer's bytes with a header and a checksum.
//
//   header   "SMBCKPT1" | u32 format (1) | u32 name length | u64 size
//            | u64 stripe unit | u64 version | name bytes       (little endian)
//   data     size bytes
//   trailer  u64 XXH64 of header and data | "SMBCKEND"
//
// A writer streams the data through; the file appears under its name only
// once it is whole (written to NAME.partial, synced, renamed). A reader
// checks everything, the checksum included, before a caller uses a byte.
#include <smb/client.hpp>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>

namespace smb::checkpoint {

// The XXH64 seed of the trailer's checksum.
inline constexpr std::uint64_t kChecksumSeed = 0x534d42;
// The file's format: a reader of another one says both and refuses the
// file before using a byte. Bump it with any change to the layout above:
// tests/unit/wire_version_test.cpp keeps the format's fingerprint beside it
// and fails until both are updated.
inline constexpr std::uint32_t kFormat = 1;
inline constexpr std::uint64_t kFormatFingerprint = 0x225747283f253fee;  // tests/unit/wire_version_test.cpp

// Writes one checkpoint file; finish() makes it appear whole, or the
// destructor removes what was written.
class FileWriter {
 public:
  FileWriter(std::string path, const CheckpointInfo& info);
  ~FileWriter();
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;
  void append(std::span<const std::byte> data);
  // Returns the checksum written.
  std::uint64_t finish();

 private:
  void put(std::span<const std::byte> bytes);

  std::string path_;
  std::string partial_;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file_;
  struct Hash;
  std::unique_ptr<Hash> hash_;  // of everything written
  std::uint64_t expected_ = 0;
  std::uint64_t written_ = 0;
  bool finished_ = false;
};

// Opens a checkpoint and verifies it whole (header, length, checksum): a
// damaged or truncated file throws Errc::invalid_argument naming the file
// and what is wrong. Then read() hands out the data in order.
class FileReader {
 public:
  explicit FileReader(std::string path);
  ~FileReader();
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;
  const CheckpointInfo& info() const { return info_; }
  // The next data bytes into `out` (at most what is left).
  std::size_t read(std::span<std::byte> out);
  // After the last read(): the bytes handed out were the ones verified (the
  // file did not change in between), else throws.
  void finish();

 private:
  std::string path_;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file_;
  CheckpointInfo info_;
  std::uint64_t left_ = 0;
  struct Hash;
  std::unique_ptr<Hash> again_;  // of what read() hands out
};

}  // namespace smb::checkpoint
