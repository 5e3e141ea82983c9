#pragma once
// Every message of the wire, defined once. This table produces the
// MessageType enum, the names (message_name), the path each message may
// arrive by (smbd's routing refuses any other: smb-server/message_routes.cpp)
// and the fields docs/architecture.md's "Messages" table must name
// (tests/unit/wire_version_test.cpp checks the doc against it, and the wire
// fingerprint takes it in, so that no change ships under an old version).
//
// Adding a message: one X(...) line here, a route with its handler in
// smb-server/message_routes.cpp (a static_assert there fails until it
// exists), a row in docs/architecture.md's table, and kVersion moved with
// the fingerprint (below). A call's fixed body is a POD struct in
// fixed_call_bodies.hpp, named here.
//
//   X(number, name, path, request, reply)
//     path     control: a control connection, a MessagePack map body
//              call:    the data path (transport.hpp), a fixed body
//     request  the body's fields ("?": optional, "(bin)": binary); for a
//              call, its fixed body struct
//     reply    the reply's fields besides ok/errc/error
//
// Numbers are never reused: 12, 14 and 17 (the MessagePack forms of vector
// ops, version waits and barriers) were removed in wire version 4, when only
// tests still sent them; their calls (18-20) remain.
#include <array>
#include <cstdint>
#include <string_view>

#define SMB_PROTOCOL_MESSAGES(X)                                                                                       \
  X(1, hello, control, "{client, id?, transport, address(bin)}",                                                       \
    "{server, transport, address(bin), session, instance, ticket(bin), replaced?} | {auth, challenge(bin)}")                      \
  X(2, reserve_name, control, "{name, layout(bin)}", "{}")                                                             \
  X(3, commit_layout, control, "{name}", "{}")                                                                         \
  X(4, get_layout, control, "{name}", "{layout(bin)}")                                                                 \
  X(5, alloc_segment, control, "{name, length}", "{segment_id, address, length, rkey(bin)}")                          \
  X(6, open_segment, control, "{name}", "{segment_id, address, length, rkey(bin)}")                                   \
  X(7, close_segment, control, "{name}", "{}")                                                                         \
  X(8, destroy, control, "{name}", "{}")                                                                               \
  X(9, stat, control, "{after?, limit?}",                                                                              \
    "{instance, capacity, used, largest_free, huge_pages, populated, clients, buffer_count, activity, waiting, buffers, next?}")  \
  X(10, list_layouts, control, "{after?, limit?}", "{layouts, next?}")                                                 \
  X(11, abandon_name, control, "{name}", "{}")                                                                         \
  X(13, get_version, control, "{name}", "{version}")                                                                   \
  X(15, lock, control, "{name, offset, length, lease_ms, timeout_ms, settled_only?, restore?}",                        \
    "{token} | {grace_ms}")                                                                                            \
  X(16, unlock, control, "{name, token}", "{}")                                                                        \
  X(18, vector_call, call, "VectorCallBody", "FixedReplyBody")                                                         \
  X(19, version_call, call, "VersionCallBody", "FixedReplyBody")                                                       \
  X(20, barrier_call, call, "BarrierCallBody", "FixedReplyBody")                                                       \
  X(21, auth, control, "{proof(bin), prefix?, expires?}", "the hello's reply")                                                            \
  X(22, begin_repair, control, "{name}", "{layout(bin), holders}")                                                     \
  X(23, end_repair, control, "{name, instances?, fresh?}", "{}")                                                       \
  X(24, hold_layout, control, "{name}", "{layout(bin), held?, repairing?}")                                            \
  X(25, set_version, control, "{name, version}", "{}")                                                                 \
  X(26, release_layout, control, "{name}", "{}")                                                                       \
  X(27, watch_repairs, control, "{holder, timeout_ms}", "{name, epoch} | {stale, layout(bin)} | {stop} | {}")          \
  X(28, ack_pause, control, "{holder, name, epoch}", "{layout(bin)}")                                                  \
  X(29, pause_holders, control, "{name, timeout_ms}", "{holders, clients, untouched}")                                 \
  X(30, segment_digest, control, "{name, offset, length, chunk}", "{digests(bin)}")                                    \
  X(31, mark_stale, control, "{name, copy, server, why}", "{layout(bin), added}")                                      \
  X(32, atomic_call, call, "AtomicCallBody", "FixedReplyBody + old")                                                   \
  X(33, segment_clients, control, "{name}", "{clients, opens?, behind}")                                               \
  X(34, server_map, control, "{}", "{replaced}")                                                                       \
  X(35, replace_server, control, "{slot, address, epoch}", "{replaced}")                                               \
  X(36, pull_copy, control, "{name, from, address(bin), ticket(bin), segment, ranges}", "{bytes}")                  \
  X(37, diagnose, control, "{}", "{checks, clock_ns}")

namespace smb::protocol {

inline constexpr std::uint32_t kMagic = 0x31424d53;  // "SMB1"
// The wire version: every frame's header carries its sender's. A hello in
// another version gets one error reply in the server's (the header and the
// error reply's body {ok, errc, error} are laid out alike in every version),
// which names both versions and the side to upgrade, and the connection
// closes: a mismatch fails at connect, never mid-session. Bump it with any
// change to a message, a fixed call or a transport's wire header:
// tests/unit/wire_version_test.cpp keeps their fingerprint beside it and
// fails until both are updated.
inline constexpr std::uint16_t kVersion = 12;
inline constexpr std::uint64_t kWireFingerprint = 0xf5271b29e48f0cad;  // tests/unit/wire_version_test.cpp

enum class MessageType : std::uint16_t {
#define SMB_MESSAGE_ENUMERATOR(number, name, path, request, reply) name = number,
  SMB_PROTOCOL_MESSAGES(SMB_MESSAGE_ENUMERATOR)
#undef SMB_MESSAGE_ENUMERATOR
};

// How a message arrives (see above).
enum class Path : std::uint8_t { control, call };

struct MessageInfo {
  std::uint16_t number;
  std::string_view name;
  Path path;
  std::string_view request;
  std::string_view reply;
};

inline constexpr std::array kMessages{
#define SMB_MESSAGE_INFO(number, name, path, request, reply) MessageInfo{number, #name, Path::path, request, reply},
    SMB_PROTOCOL_MESSAGES(SMB_MESSAGE_INFO)
#undef SMB_MESSAGE_INFO
};

consteval bool numbered_in_order() {
  for (std::size_t i = 1; i < kMessages.size(); ++i)
    if (kMessages[i].number <= kMessages[i - 1].number) return false;
  return kMessages.front().number >= 1;
}
static_assert(numbered_in_order(), "SMB_PROTOCOL_MESSAGES: numbers ascend, from 1");

inline constexpr std::uint16_t kLastMessage = kMessages.back().number;

// Each number's place in kMessages (-1: no message): every control request
// and call is looked up, so in one step.
inline constexpr auto kMessageSlots = [] {
  std::array<std::int8_t, kLastMessage + 1> slots{};
  slots.fill(-1);
  for (std::size_t i = 0; i < kMessages.size(); ++i) slots[kMessages[i].number] = static_cast<std::int8_t>(i);
  return slots;
}();

// The message numbered `type` (the reply bit ignored by callers), or nullptr.
constexpr const MessageInfo* message_info(std::uint16_t type) {
  return type < kMessageSlots.size() && kMessageSlots[type] >= 0 ? &kMessages[static_cast<std::size_t>(kMessageSlots[type])]
                                                                 : nullptr;
}

constexpr const MessageInfo& message_info(MessageType type) { return *message_info(static_cast<std::uint16_t>(type)); }

}  // namespace smb::protocol
