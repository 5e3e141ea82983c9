// libFuzzer target: the layout codec, the one structure clients store on
// servers and read back. A layout it accepts must round-trip unchanged.
#include "protocol/layout_codec.hpp"

#include <cstdint>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace smb::protocol;
  try {
    const Body body = decode_body({data, size});
    const auto it = body.find("layout");
    const smb::Layout layout = layout_from_body(it != body.end() ? *it : body, "fuzz");
    const smb::Layout again = layout_from_body(layout_to_body(layout), "fuzz");
    if (again.name != layout.name || again.size != layout.size || again.stripe_unit != layout.stripe_unit ||
        again.servers != layout.servers || again.shares != layout.shares || again.instances != layout.instances)
      std::abort();
    if (layout.stripe_unit % 8 != 0 || layout.servers.empty() || layout.servers.size() > kMaxServersPerBuffer ||
        (!layout.instances.empty() && layout.instances.size() != layout.servers.size()))
      std::abort();
    (void)home_server_index(layout.name, layout.servers);
  } catch (const smb::Error&) {
  }
  return 0;
}
