#pragma once
// A repair's bytes moved server to server (pull_copy): this smbd, which
// holds the copy being rebuilt, reads ranges of the surviving copy from its
// smbd over the data transport, straight into its own segment. It connects
// as one more data channel of the repairing client's session there: the
// client hands over its ticket and the source's segment descriptor, and the
// source admits the channel as it would the client's (ChannelAdmission). The
// repairing client only orchestrates (smb-client/repair_copy.cpp), and each
// byte crosses the network once instead of twice.
#include "segment_store.hpp"

#include "protocol/messages.hpp"
#include "transport/registry.hpp"
#include "transport/transport.hpp"

#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace smb::server {

class CopyPuller {
 public:
  // `transport` and `options`: this smbd's own (a client side of the same
  // transport reaches the other smbd).
  CopyPuller(std::string transport, transport::TransportOptions options, SegmentStore& store);
  ~CopyPuller();

  // Serves a pull_copy request: {name, from, address(bin), ticket(bin),
  // segment, ranges}; returns {bytes}. Blocks until every range is in (run
  // it on the worker pool); throws smb::Error naming the source server.
  protocol::Body pull(const protocol::Body& request);

 private:
  transport::ClientTransport& client();

  std::string transport_;
  transport::TransportOptions options_;
  SegmentStore& store_;
  std::mutex mutex_;  // guards client_'s creation
  std::unique_ptr<transport::ClientTransport> client_;
};

}  // namespace smb::server
