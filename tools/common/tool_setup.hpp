#pragma once
// Set-up shared by the command-line tools: logging and client options.
#include <smb/client.hpp>

#include <optional>
#include <string>

namespace smb::tools {

// Routes log output (libsmb's included) to stderr, so that stdout carries
// only results (one JSON document with --json). Warnings and errors only,
// unless verbose.
void init_logging(bool verbose);

// Options for a Client: the servers of `servers_flag` ("h1:p1,h2:p2") when
// given, else ClientOptions' own default (SMB_SERVERS). Throws smb::Error on
// a malformed list.
ClientOptions client_options(const std::optional<std::string>& servers_flag);

}  // namespace smb::tools
