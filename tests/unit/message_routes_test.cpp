// The routing table (smb-server/message_routes.hpp): every message has one
// route, and a message arriving by a path its route does not allow is a
// protocol error, never another message's reply.
#include "message_routes.hpp"

#include <gtest/gtest.h>

#include <string>

namespace smb::server {
namespace {

using protocol::MessageType;

constexpr std::uint16_t type_of(MessageType t) { return static_cast<std::uint16_t>(t); }

TEST(MessageRoutes, EveryMessageHasItsOwnRoute) {
  for (std::uint16_t t = type_of(MessageType::hello); t <= type_of(MessageType::barrier); ++t) {
    const Route& route = route_for(t, kControl);
    EXPECT_EQ(type_of(route.type), t) << protocol::message_name(t);
    EXPECT_NE(route.handler, nullptr) << protocol::message_name(t);
  }
  // The fixed-body calls are served before the table (data_path_calls.cpp).
  for (auto t : {MessageType::vector_call, MessageType::version_call, MessageType::barrier_call,
                 MessageType::atomic_call})
    EXPECT_EQ(route_for(type_of(t), kCall).type, t);
  // auth is a session's answer to a challenge (control_session.cpp); the table only refuses it out of turn.
  EXPECT_EQ(route_for(type_of(MessageType::auth), kControl).type, MessageType::auth);
  for (std::uint16_t t = type_of(MessageType::begin_repair); t <= type_of(MessageType::mark_stale); ++t)
    EXPECT_EQ(type_of(route_for(t, kControl).type), t) << protocol::message_name(t);
  EXPECT_EQ(route_for(type_of(MessageType::segment_clients), kControl).type, MessageType::segment_clients);
}

TEST(MessageRoutes, OnlyDataCarryingAndWaitingMessagesComeAsCalls) {
  for (auto t : {MessageType::vector_call, MessageType::version_call, MessageType::barrier_call,
                 MessageType::atomic_call})
    EXPECT_EQ(route_for(type_of(t), kCall).runs_on, RunsOn::arrival);
  // Each request has one encoding per path: the MessagePack forms of the
  // fixed calls come only over a control connection, and the reverse.
  for (auto t :
       {MessageType::hello, MessageType::lock, MessageType::barrier, MessageType::destroy, MessageType::vector_op,
        MessageType::get_version, MessageType::wait_version, MessageType::begin_repair, MessageType::set_version,
        MessageType::hold_layout, MessageType::watch_repairs, MessageType::ack_pause, MessageType::pause_holders,
        MessageType::segment_digest, MessageType::mark_stale, MessageType::segment_clients}) {
    try {
      route_for(type_of(t), kCall);
      ADD_FAILURE() << protocol::message_name(type_of(t)) << " was routed as a call";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::protocol);
      EXPECT_NE(std::string(e.what()).find("not served over the data path"), std::string::npos) << e.what();
    }
  }
}

TEST(MessageRoutes, UnknownTypesAreProtocolErrors) {
  for (int t : {0, type_of(MessageType::segment_clients) + 1, 0x7fff, 0xffff}) {
    try {
      route_for(static_cast<std::uint16_t>(t), kControl);
      ADD_FAILURE() << "type " << t << " was routed";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::protocol);
      EXPECT_NE(std::string(e.what()).find("unknown control message type"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace smb::server
