#pragma once
// Plain-text tables and number formatting for smbctl's human output.
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace smb::smbctl {

class Table {
 public:
  explicit Table(std::vector<std::string> headers);
  // Numbers read better right-aligned.
  void align_right(std::size_t column);
  void add_row(std::vector<std::string> cells);
  bool empty() const noexcept { return rows_.empty(); }
  void print(std::ostream& out, std::string_view indent = "") const;

 private:
  std::vector<std::string> headers_;
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;
};

// "37.5%" (one decimal); "-" when whole is 0.
std::string percent(std::uint64_t part, std::uint64_t whole);
// "1.5 KiB (37.5%)"
std::string bytes_with_percent(std::uint64_t part, std::uint64_t whole);

}  // namespace smb::smbctl
