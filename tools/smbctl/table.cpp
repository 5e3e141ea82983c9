#include "table.hpp"

#include <util/parse.hpp>

#include <algorithm>
#include <cstdio>

namespace smb::smbctl {

Table::Table(std::vector<std::string> headers)
    : headers_(std::move(headers)), right_(headers_.size(), false) {}

void Table::align_right(std::size_t column) {
  if (column < right_.size()) right_[column] = true;
}

void Table::add_row(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  rows_.push_back(std::move(cells));
}

void Table::print(std::ostream& out, std::string_view indent) const {
  std::vector<std::size_t> width(headers_.size());
  for (std::size_t c = 0; c < headers_.size(); ++c) {
    width[c] = headers_[c].size();
    for (const auto& row : rows_) width[c] = std::max(width[c], row[c].size());
  }
  auto print_row = [&](const std::vector<std::string>& cells) {
    std::string line(indent);
    for (std::size_t c = 0; c < cells.size(); ++c) {
      const std::string pad(width[c] - cells[c].size(), ' ');
      if (c != 0) line += "  ";
      line += right_[c] ? pad + cells[c] : cells[c] + (c + 1 < cells.size() ? pad : "");
    }
    out << line << '\n';
  };
  print_row(headers_);
  for (const auto& row : rows_) print_row(row);
}

std::string percent(std::uint64_t part, std::uint64_t whole) {
  if (whole == 0) return "-";
  char text[32];
  std::snprintf(text, sizeof text, "%.1f%%",
                100.0 * static_cast<double>(part) / static_cast<double>(whole));
  return text;
}

std::string bytes_with_percent(std::uint64_t part, std::uint64_t whole) {
  return util::format_bytes(part) + " (" + percent(part, whole) + ")";
}

}  // namespace smb::smbctl
