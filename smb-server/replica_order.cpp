#include "replica_order.hpp"

namespace smb::server {

OrderCheck check_order(std::uint64_t version, std::uint64_t order, bool behind) noexcept {
  if (order == 0) return {};
  if (behind) return {OrderVerdict::refuse_behind, 0};
  if (version + 1 < order) return {OrderVerdict::wait, order - 1};
  if (version + 1 > order) return {OrderVerdict::refuse_taken, 0};
  return {};
}

std::string order_refusal(const OrderCheck& check, const std::string& what, std::uint64_t order,
                          std::uint64_t version) {
  if (check.verdict == OrderVerdict::refuse_behind)
    return what + ": op order " + std::to_string(order) +
           " cannot follow here: an op before it never came (its client died between the copies), so this copy "
           "is behind its primary until repaired";
  return what + ": op order " + std::to_string(order) + " is taken here (version " + std::to_string(version) +
         "): this replica no longer follows its primary";
}

}  // namespace smb::server
