#include "control_server.hpp"

#include <spdlog/spdlog.h>

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <thread>

namespace smb::server {

namespace asio = boost::asio;
using asio::ip::tcp;

class ControlServer::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(ControlServer& server, tcp::socket socket, SessionId id)
      : server_(server), socket_(std::move(socket)), id_(id) {
    boost::system::error_code ec;
    auto remote = socket_.remote_endpoint(ec);
    peer_ = ec ? std::string("?") : remote.address().to_string() + ":" + std::to_string(remote.port());
  }

  void start() { read_header(); }
  void close() {
    boost::system::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

 private:
  void read_header() {
    asio::async_read(socket_, asio::buffer(header_), [self = shared_from_this()](auto ec, std::size_t) {
      if (ec) return self->end(ec.message());
      try {
        self->request_ = protocol::decode_header(self->header_);
      } catch (const Error& e) {
        return self->end(e.what());  // not our protocol: drop the connection
      }
      self->body_.resize(self->request_.body_length);
      self->read_body();
    });
  }

  void read_body() {
    asio::async_read(socket_, asio::buffer(body_), [self = shared_from_this()](auto ec, std::size_t) {
      if (ec) return self->end(ec.message());
      const auto type = self->request_.type;
      const bool vector_op = type == static_cast<std::uint16_t>(protocol::MessageType::vector_op);
      if (vector_op || Coordination::handles(type)) {
        protocol::Body body;
        try {
          body = protocol::decode_body(self->body_);
        } catch (const Error& e) {
          return self->send(protocol::error_reply(e.code(), e.what()));
        }
        if (vector_op) {  // one request at a time per session: the session waits for this reply
          return self->server_.run_vector_op(std::move(body), {}, [self](protocol::Body reply) {
            if (!self->ended_) self->send(reply);
          });
        }
        self->deferred_ = true;
        self->server_.coordination_.handle(self->id_, type, body, [self](protocol::Body reply) {
          asio::post(self->socket_.get_executor(), [self, reply = std::move(reply)] {
            if (!self->ended_) self->send(reply);
          });
        });
        return self->watch_while_deferred();
      }
      self->send(self->handle());
    });
  }

  protocol::Body handle() {
    try {
      return server_.handler_.handle(id_, request_.type, protocol::decode_body(body_));
    } catch (const Error& e) {
      return protocol::error_reply(e.code(), e.what());
    }
  }

  // No read is outstanding while a reply is deferred, so a client that dies
  // then would go unnoticed (and keep its barrier waiting). Watch the socket:
  // readable with nothing to read means the client has gone.
  void watch_while_deferred() {
    socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec || self->ended_ || !self->deferred_) return;
      char byte = 0;
      const auto n = ::recv(self->socket_.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        self->end("disconnected while waiting for a deferred reply");
      // Bytes available: the client sent its next request early; read_header takes it after the reply.
    });
  }

  void send(const protocol::Body& reply) {
    deferred_ = false;
    out_ = protocol::encode_frame(request_.type | protocol::kReplyBit, request_.request_id, reply);
    asio::async_write(socket_, asio::buffer(out_), [self = shared_from_this()](auto ec, std::size_t) {
      if (ec) return self->end(ec.message());
      self->read_header();
    });
  }

  void end(const std::string& why) {
    if (ended_) return;
    ended_ = true;
    spdlog::info("client {} (session {}) left: {}", peer_, id_, why);
    server_.registry_.session_closed(id_);
    server_.coordination_.session_closed(id_);
    server_.clients_ -= 1;
    close();
    server_.sessions_.erase(shared_from_this());
  }

  ControlServer& server_;
  tcp::socket socket_;
  SessionId id_;
  std::string peer_;
  bool ended_ = false;
  bool deferred_ = false;  // a coordination reply is still to come
  std::array<std::uint8_t, protocol::kHeaderSize> header_{};
  protocol::Header request_;
  std::vector<std::uint8_t> body_;
  std::vector<std::uint8_t> out_;
};

ControlServer::ControlServer(asio::io_context& io, const tcp::endpoint& listen, Registry& registry,
                             ServerIdentity& identity)
    : io_(io),
      acceptor_(io),
      registry_(registry),
      handler_(registry, identity, clients_),
      coordination_(io, registry),
      workers_(std::max(1u, std::thread::hardware_concurrency())) {
  acceptor_.open(listen.protocol());
  acceptor_.set_option(tcp::acceptor::reuse_address(true));
  acceptor_.bind(listen);  // throws boost::system::system_error (e.g. address in use)
  acceptor_.listen();
}

void ControlServer::start() { accept(); }

void ControlServer::accept() {
  acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec != asio::error::operation_aborted) spdlog::warn("accept failed: {}", ec.message());
      if (acceptor_.is_open()) accept();
      return;
    }
    socket.set_option(tcp::no_delay(true));
    auto session = std::make_shared<Session>(*this, std::move(socket), next_session_++);
    clients_ += 1;
    sessions_.insert(session);
    session->start();
    accept();
  });
}

void ControlServer::shutdown() {
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  for (const auto& s : std::set(sessions_)) s->close();
}

}  // namespace smb::server
