#pragma once
// The control plane: a Boost.Asio TCP server, one Session per client
// connection, one request at a time per session.
#include "coordination.hpp"
#include "request_handler.hpp"

#include <boost/asio.hpp>

#include <functional>
#include <set>

namespace smb::server {

class ControlServer {
 public:
  ControlServer(boost::asio::io_context& io, const boost::asio::ip::tcp::endpoint& listen,
                Registry& registry, ServerIdentity& identity);
  boost::asio::ip::tcp::endpoint local_endpoint() const { return acceptor_.local_endpoint(); }
  void start();
  // Closes the listener and every session.
  void shutdown();
  // A call that came over the data path (transport.hpp): vector ops, version
  // reads and waits. Runs on the transport's thread; answers through `respond`.
  void serve_call(transport::Bytes frame, transport::Bytes payload, transport::Respond respond);

 private:
  class Session;
  void accept();
  // Runs a vector op on the worker pool (x in `request` or `payload`), then,
  // on the io thread, wakes the buffer's version waiters and calls `reply`.
  void run_vector_op(protocol::Body request, transport::Bytes payload, std::function<void(protocol::Body)> reply);

  boost::asio::io_context& io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  Registry& registry_;
  std::atomic<std::uint32_t> clients_{0};
  RequestHandler handler_;
  Coordination coordination_;  // deferred replies: version waits, locks, barriers
  // Vector ops run here, off the io thread, so that one large op does not
  // stall every other client's control requests.
  boost::asio::thread_pool workers_;
  std::set<std::shared_ptr<Session>> sessions_;  // touched only on the io thread
  SessionId next_session_ = 1;
};

}  // namespace smb::server
