#pragma once
// Host findings on the wire (the diagnose message's "checks"): an array of
// {level, check, detail, fix}. A server's answer is untrusted: decoding
// bounds its size and refuses an unknown level.
#include "protocol/messages.hpp"

#include <smb/host_checks.hpp>

#include <vector>

namespace smb::host {

protocol::Body findings_to_body(const std::vector<HostFinding>& findings);
// Throws Errc::protocol naming `what` for anything but what findings_to_body makes.
std::vector<HostFinding> findings_from_body(const protocol::Body& body, const char* what);

}  // namespace smb::host
