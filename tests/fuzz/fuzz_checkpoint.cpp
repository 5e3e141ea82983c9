// Checkpoint files (smbctl load, Client::load, UpdateEngine resume_from) are
// read from wherever a user points: the reader must refuse any damage with
// Errc::invalid_argument and nothing else. An input whose first byte is odd
// gets a valid trailer (its checksum) appended, so that the fuzzer also
// reaches the data path past the checksum: reading every byte out and the
// final re-check.
#include "checkpoint_file.hpp"
#include "fuzz_scratch_file.hpp"

#include <smb/error.hpp>

#include <xxhash.h>

#include <array>
#include <cstdlib>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  std::vector<std::uint8_t> file(data + 1, data + size);
  if ((data[0] & 1) != 0) {
    const std::uint64_t checksum = XXH64(file.data(), file.size(), smb::checkpoint::kChecksumSeed);
    for (int i = 0; i < 8; ++i) file.push_back(static_cast<std::uint8_t>(checksum >> (8 * i)));
    for (char c : std::array<char, 8>{'S', 'M', 'B', 'C', 'K', 'E', 'N', 'D'}) file.push_back(static_cast<std::uint8_t>(c));
  }
  try {
    smb::checkpoint::FileReader reader(smb::fuzz::write_scratch(file));
    std::array<std::byte, 4096> chunk{};
    std::uint64_t read = 0;
    while (const auto n = reader.read(chunk)) read += n;
    if (read != reader.info().size) std::abort();  // verified, yet the data was not all there
    reader.finish();
  } catch (const smb::Error& e) {
    if (e.code() != smb::Errc::invalid_argument) std::abort();  // damage must read as invalid_argument
  }
  return 0;
}
