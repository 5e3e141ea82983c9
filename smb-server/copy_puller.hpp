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

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace smb::server {

class CopyPuller {
 public:
  // `transport` and `options`: this smbd's own (a client side of the same
  // transport reaches the other smbd).
  CopyPuller(std::string transport, transport::TransportOptions options, SegmentStore& store);
  ~CopyPuller();

  // Serves a pull_copy request: {name, from, address(bin), ticket(bin),
  // segment, ranges}; returns {bytes}. Blocks until every range is in (run
  // it on the worker pool), the reads of one pull at a time; throws
  // smb::Error naming the source server.
  protocol::Body pull(const protocol::Body& request);

  // Starts this smbd's client side of the transport ahead of the first pull
  // (call it off the io thread). A restarted or replacement server is where
  // a repair's pulls land, and UCX's start there cost 60-230 ms of the
  // repair (docs/reliability.md). A failure is left for the pull to report.
  void warm();

 private:
  transport::ClientTransport& client();

  std::string transport_;
  transport::TransportOptions options_;
  SegmentStore& store_;
  std::mutex mutex_;  // guards client_'s creation
  std::mutex turn_;   // held by the pull whose reads run
  std::unique_ptr<transport::ClientTransport> client_;

  // A pull's channel lingers a few seconds before it is closed (on a later
  // pull, or at this smbd's exit): UCX 1.13 aborts the source smbd when the
  // connection drops while its wire-up reply is still queued there
  // (ucp_request.c:684, "got REP message"), which a pull of a few KiB, over
  // before the wire-up, risked. Declared after client_: closed before it.
  struct Lingering {
    std::chrono::steady_clock::time_point done;
    std::unique_ptr<transport::Channel> channel;
    std::unique_ptr<transport::RemoteSegment> remote;  // released first
  };
  void linger(std::unique_ptr<transport::Channel> channel, std::unique_ptr<transport::RemoteSegment> remote);
  std::mutex lingering_mutex_;
  std::vector<Lingering> lingering_;
};

}  // namespace smb::server
