#pragma once
// A segment's descriptor in a control body (alloc_segment's and
// open_segment's replies, and the source of a pull_copy): where a data
// channel finds its memory. smbd writes it, clients and a pulling smbd read it.
#include "protocol/messages.hpp"
#include "transport/transport.hpp"

#include <string>

namespace smb::protocol {

Body segment_body(const transport::SegmentDescriptor& d);
// Throws Errc::protocol naming `context` where a field is missing or malformed.
transport::SegmentDescriptor segment_from(const Body& body, const std::string& context);

}  // namespace smb::protocol
