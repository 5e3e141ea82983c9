// The routing table (smb-server/message_routes.hpp): every message has one
// route, and a message arriving by a path its route does not allow is a
// protocol error, never another message's reply.
#include "message_routes.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace smb::server {
namespace {

using protocol::MessageType;

constexpr std::uint16_t type_of(MessageType t) { return static_cast<std::uint16_t>(t); }

TEST(MessageRoutes, EveryMessageHasItsOwnRouteByItsSchemasPath) {
  for (const auto& message : protocol::kMessages) {
    const auto path = message.path == protocol::Path::call ? kCall : kControl;
    const auto other = path == kCall ? kControl : kCall;
    const Route& route = route_for(message.number, path);
    EXPECT_EQ(type_of(route.type), message.number) << message.name;
    EXPECT_EQ(route.handler != nullptr, path == kControl) << message.name << ": a handler for each control message";
    EXPECT_EQ(route.call, path == kCall) << message.name;
    // Each request has one encoding and one path: the other refuses it.
    try {
      route_for(message.number, other);
      ADD_FAILURE() << message.name << " was routed by the other path";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::protocol);
      EXPECT_NE(std::string(e.what()).find(other == kCall ? "not served over the data path" : "only over the data path"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(MessageRoutes, OnlyDataCarryingAndWaitingMessagesComeAsCalls) {
  std::vector<MessageType> calls;
  for (const auto& message : protocol::kMessages)
    if (message.path == protocol::Path::call) calls.push_back(static_cast<MessageType>(message.number));
  EXPECT_EQ(calls, (std::vector{MessageType::vector_call, MessageType::version_call, MessageType::barrier_call,
                                MessageType::atomic_call}));
}

TEST(MessageRoutes, UnknownTypesAreProtocolErrors) {
  for (int t : {0, 12, 14, 17, protocol::kLastMessage + 1, 0x7fff, 0xffff}) {  // 12, 14, 17: removed (v4)
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
