#include "protocol/segment_codec.hpp"

namespace smb::protocol {

Body segment_body(const transport::SegmentDescriptor& d) {
  return Body{{"segment_id", d.id}, {"address", d.address}, {"length", d.length}, {"rkey", binary(d.remote_key)}};
}

transport::SegmentDescriptor segment_from(const Body& body, const std::string& context) {
  transport::SegmentDescriptor d;
  d.id = get_u64(body, "segment_id", context);
  d.address = get_u64(body, "address", context);
  d.length = get_u64(body, "length", context);
  d.remote_key = get_binary(body, "rkey", context);
  return d;
}

}  // namespace smb::protocol
