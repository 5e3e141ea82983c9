// smbctl dump: elements of a buffer as numbers, so that anyone can check a
// server-side op's result from the shell.
#include "../common/vector_elements.hpp"
#include "commands.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <iostream>
#include <vector>

namespace smb::smbctl {

void dump_elements(Client& client, const std::string& name, DType type, std::uint64_t offset,
                   std::optional<std::uint64_t> count, bool json) {
  Buffer buffer = client.open(name);
  const std::uint64_t esize = element_size(type);
  const std::uint64_t total = buffer.size() / esize;
  if (offset > total)
    throw Error(Errc::out_of_range, "buffer '" + name + "' has " + std::to_string(total) + " " +
                                        dtype_name(type) + " elements; --offset " + std::to_string(offset) +
                                        " is past its end");
  const std::uint64_t n = std::min(count.value_or(total - offset), total - offset);
  constexpr std::uint64_t chunk = 1u << 16;
  std::vector<std::byte> bytes(static_cast<std::size_t>(std::min(n, chunk) * esize));
  nlohmann::json values = nlohmann::json::array();
  auto emit = [&](auto v) {
    if (json)
      values.push_back(v);
    else
      std::cout << v << '\n';
  };
  for (std::uint64_t first = 0; first < n; first += chunk) {
    const auto m = static_cast<std::size_t>(std::min(chunk, n - first));
    buffer.read((offset + first) * esize, std::span(bytes).first(m * esize));
    for (std::size_t i = 0; i < m; ++i) {
      if (is_integer(type))
        emit(tools::integer_at(type, bytes.data(), i));  // exact, also past 2^53
      else
        emit(tools::element_at(type, bytes.data(), i));
    }
  }
  if (json)
    std::cout << nlohmann::json{{"name", name}, {"dtype", dtype_name(type)}, {"offset", offset}, {"values", values}}.dump()
              << '\n';
}

}  // namespace smb::smbctl
