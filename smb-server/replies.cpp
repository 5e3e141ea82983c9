#include "replies.hpp"

#include <spdlog/spdlog.h>

#include <atomic>
#include <memory>

namespace smb::server {

ReplyFn reply_once(ReplyFn reply) {
  auto answered = std::make_shared<std::atomic<bool>>(false);
  return [answered, reply = std::move(reply)](protocol::Body body) {
    if (!answered->exchange(true)) reply(std::move(body));
  };
}

ErrorText current_error(std::uint16_t type) noexcept {
  try {
    throw;
  } catch (const Error& e) {
    return {e.code(), e.what()};
  } catch (const std::exception& e) {
    spdlog::error("request {} failed: {}", protocol::message_name(type), e.what());
    return {Errc::internal, std::string(protocol::message_name(type)) + ": " + e.what()};
  } catch (...) {
    spdlog::error("request {} failed with an unknown exception", protocol::message_name(type));
    return {Errc::internal, std::string(protocol::message_name(type)) + ": unknown failure"};
  }
}

protocol::Body current_error_reply(std::uint16_t type) noexcept {
  auto error = current_error(type);
  return protocol::error_reply(error.code, error.message);
}

}  // namespace smb::server
