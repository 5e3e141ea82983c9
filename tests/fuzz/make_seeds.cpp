// Writes the fuzzers' seed corpus: well-formed messages of every kind, so
// that fuzzing starts from the shapes real clients send.
//   fuzz_make_seeds DIR   (writes DIR/<target>/<name>; tests/fuzz/corpus is its output)
#include "checkpoint_file.hpp"
#include "protocol/fixed_calls.hpp"
#include "protocol/layout_codec.hpp"
#include "protocol/messages.hpp"
#include "protocol/striping.hpp"
#include "transport/tcp/tcp_wire.hpp"
#include "transport/ucx/am_wire.hpp"
#include "transport/verbs/verbs_calls.hpp"

#include <xxhash.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

namespace {

using namespace smb;
using protocol::Body;
using protocol::Bytes;
using protocol::MessageType;
namespace fs = std::filesystem;

fs::path root;

void write(const std::string& target, const std::string& name, const Bytes& bytes) {
  fs::create_directories(root / target);
  std::ofstream(root / target / name, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

template <class T>
void append(Bytes& out, const T& value) {
  const auto* p = reinterpret_cast<const std::uint8_t*>(&value);
  out.insert(out.end(), p, p + sizeof value);
}

Bytes body(const Body& b) { return Body::to_msgpack(b); }
std::uint16_t type_of(MessageType t) { return static_cast<std::uint16_t>(t); }

Layout layout(const std::string& name, std::uint64_t size, std::uint64_t unit, std::vector<std::string> servers) {
  Layout l{name, size, unit, std::move(servers), {}, {}, 1, {}};
  protocol::StripeGeometry g{size, unit, static_cast<std::uint32_t>(l.servers.size())};
  for (std::uint32_t i = 0; i < g.servers; ++i) l.shares.push_back(g.share(i));
  return l;
}

// Every request kind, as a real client would send it to server 127.0.0.1:7000.
std::vector<std::pair<MessageType, Body>> requests() {
  const auto one = protocol::layout_to_body(layout("w", 65536, 4096, {"127.0.0.1:7000"}));
  return {
      {MessageType::hello,
       {{"client", "libsmb"}, {"id", 0x1d}, {"transport", "ucx"}, {"address", protocol::binary({1, 2, 3})}}},
      {MessageType::reserve_name, {{"name", "w"}, {"layout", one}}},
      {MessageType::alloc_segment, {{"name", "w"}, {"length", 65536}}},
      {MessageType::commit_layout, {{"name", "w"}}},
      {MessageType::get_layout, {{"name", "w"}}},
      {MessageType::open_segment, {{"name", "w"}}},
      {MessageType::get_version, {{"name", "w"}}},
      {MessageType::lock, {{"name", "w"}, {"offset", 0}, {"length", 64}, {"lease_ms", 1000}, {"timeout_ms", 5}}},
      {MessageType::unlock, {{"name", "w"}, {"token", 1}}},
      {MessageType::stat, {{"after", "a"}, {"limit", 10}}},
      {MessageType::list_layouts, Body::object()},
      {MessageType::close_segment, {{"name", "w"}}},
      {MessageType::abandon_name, {{"name", "w"}}},
      {MessageType::destroy, {{"name", "w"}}},
  };
}

void frame_seeds() {
  std::uint32_t id = 1;
  for (const auto& [type, b] : requests()) {
    write("fuzz_frame", std::string(protocol::message_name(type_of(type))) + "-" + std::to_string(id),
          protocol::encode_frame(type_of(type), id, b));
    ++id;
  }
  write("fuzz_frame", "error-reply", body(protocol::error_reply(Errc::not_found, "no buffer named 'w'")));
  write("fuzz_frame", "stat-reply",
        body(protocol::ok_reply({{"capacity", 1 << 20}, {"buffers", {{{"name", "w"}, {"bytes", 8}}}}, {"next", "w"}})));
}

void layout_seeds() {
  write("fuzz_layout", "one-server", body({{"layout", protocol::layout_to_body(layout("a", 65536, 4096, {"127.0.0.1:7000"}))}}));
  write("fuzz_layout", "three-servers",
        body(protocol::layout_to_body(layout("b/c@d", 3 * 4096 + 17 * 8, 4096, {"10.0.0.1:1", "10.0.0.2:2", "h:3"}))));
  write("fuzz_layout", "ipv6", body(protocol::layout_to_body(layout("v6", 8, 8, {"[::1]:7000"}))));
  auto two_copies = layout("copies", 6 * 4096, 4096, {"10.0.0.1:1", "10.0.0.2:2", "10.0.0.3:3"});
  two_copies.replicas = 2;
  write("fuzz_layout", "two-copies", body(protocol::layout_to_body(two_copies)));
  two_copies.stale = {{1, 1}, {0, 2}};  // one copy of two stripes: each keeps the other
  write("fuzz_layout", "stale-copies", body(protocol::layout_to_body(two_copies)));
}

void data_channel_seeds() {
  using namespace smb::transport::ucx;
  auto seed = [](std::uint8_t kind, const auto& header, const Bytes& data) {
    Bytes out{kind, static_cast<std::uint8_t>(sizeof header)};
    append(out, header);
    out.insert(out.end(), data.begin(), data.end());
    return out;
  };
  write("fuzz_data_channel", "write", seed(0, AmRequestHeader{1, 1, 64, 128}, {}));
  write("fuzz_data_channel", "read-end", seed(0, AmRequestHeader{2, 3, 56 * 1024 - 8, 8}, {}));
  write("fuzz_data_channel", "fetch-add", seed(1, AmAtomicHeader{3, 2, 8, 1, 0, 5, 0}, {}));
  write("fuzz_data_channel", "compare-swap", seed(1, AmAtomicHeader{4, 1, 16, 2, 0, 9, 0}, {}));
  const Bytes frame = protocol::encode_version_call(7, protocol::VersionCallKind::get, "w");
  Bytes call = frame;
  call.insert(call.end(), 16, 0x42);  // a payload
  write("fuzz_data_channel", "ucx-call", seed(2, smb::transport::CallHeader{5, static_cast<std::uint32_t>(frame.size()), 0}, call));
  Bytes verbs{3, 0};
  append(verbs, smb::transport::CallHeader{6, static_cast<std::uint32_t>(frame.size()), 0});
  verbs.insert(verbs.end(), call.begin(), call.end());
  write("fuzz_data_channel", "verbs-call", verbs);
  using smb::transport::tcp::Kind;
  using smb::transport::tcp::RequestHeader;
  const auto tcp = [](Kind kind, std::uint64_t segment, std::uint64_t offset, std::uint64_t length) {
    RequestHeader h;
    h.kind = static_cast<std::uint32_t>(kind);
    h.token = 7;
    h.segment_id = segment;
    h.offset = offset;
    h.length = length;
    return h;
  };
  write("fuzz_data_channel", "tcp-put", seed(4, tcp(Kind::put, 1, 64, 128), {}));
  write("fuzz_data_channel", "tcp-get-end", seed(4, tcp(Kind::get, 3, 56 * 1024 - 8, 8), {}));
  RequestHeader add = tcp(Kind::atomic, 2, 8, 0);
  add.atomic_op = 1;
  add.operand = 5;
  write("fuzz_data_channel", "tcp-fetch-add", seed(4, add, {}));
  RequestHeader tcp_call = tcp(Kind::call, 0, 0, 16);
  tcp_call.frame_length = static_cast<std::uint32_t>(frame.size());
  write("fuzz_data_channel", "tcp-call", seed(4, tcp_call, call));
}

void request_seeds() {
  auto record = [](Bytes& out, std::uint8_t how, std::uint16_t type, const Bytes& bytes) {
    out.push_back(how);
    append(out, type);
    append(out, static_cast<std::uint16_t>(bytes.size()));
    out.insert(out.end(), bytes.begin(), bytes.end());
  };
  Bytes lifecycle;
  for (const auto& [type, b] : requests()) record(lifecycle, 0, type_of(type), body(b));
  write("fuzz_requests", "lifecycle", lifecycle);
  // Two sessions contending for a lock, and calls over the data path.
  Bytes calls;
  const auto reqs = requests();
  for (int i : {1, 2, 3}) record(calls, 0, type_of(reqs[static_cast<std::size_t>(i)].first), body(reqs[static_cast<std::size_t>(i)].second));
  const Body lock = {{"name", "w"}, {"offset", 0}, {"length", 64}, {"lease_ms", 1000}, {"timeout_ms", 5}};
  record(calls, 0, type_of(MessageType::lock), body(lock));
  record(calls, 2, type_of(MessageType::lock), body(lock));
  // The two-keeper forms: in the fuzzer's fresh server, its grace (answered
  // with grace_ms), a restore refused (held) and one granted, a bad flag.
  Body settled = lock;
  settled["settled_only"] = true;
  record(calls, 2, type_of(MessageType::lock), body(settled));
  Body restore = lock;
  restore["restore"] = true;
  record(calls, 2, type_of(MessageType::lock), body(restore));
  restore["offset"] = 4096;
  record(calls, 2, type_of(MessageType::lock), body(restore));
  restore["restore"] = "yes";
  record(calls, 2, type_of(MessageType::lock), body(restore));
  Bytes frame = protocol::encode_vector_call(9, smb::VectorOp::axpy, smb::DType::f32, 0, 4, 2.0, "w");
  frame.insert(frame.end(), 16, 0x40);  // x, split off as the payload
  record(calls, 1 | (16 << 1), 0, frame);
  record(calls, 1, 0,  // x in the same buffer
         protocol::encode_vector_call(14, smb::VectorOp::axpy, smb::DType::f64, 8, 1, 0.5, "w", std::string_view("w"),
                                      1024));
  record(calls, 1, 0, protocol::encode_version_call(10, protocol::VersionCallKind::get, "w"));
  record(calls, 1, 0, protocol::encode_version_call(11, protocol::VersionCallKind::wait, "w", 2, 5));
  record(calls, 1, 0, protocol::encode_barrier_call(12, "b", 2, 5, 1));
  record(calls, 1, 0, protocol::encode_barrier_call(13, "b", 2, 5, 2));
  write("fuzz_requests", "calls-and-locks", calls);
  // A second copy's segment and ordered ops on it: one in turn, one ahead of it, one taken.
  Bytes ordered;
  record(ordered, 0, type_of(MessageType::hello), body(reqs[0].second));
  record(ordered, 0, type_of(MessageType::alloc_segment), body({{"name", "w#r1"}, {"length", 4096}}));
  for (std::uint64_t order : {1, 3, 2, 2})
    record(ordered, 1, 0,
           protocol::encode_vector_call(static_cast<std::uint32_t>(20 + order), smb::VectorOp::scale, smb::DType::f32,
                                        0, 4, 2.0, "w#r1", std::nullopt, 0, order));
  // Atomics on the copy, ordered after those: in turn, ahead, misaligned, past the end.
  for (std::uint64_t order : {3, 5, 4})
    record(ordered, 1, 0,
           protocol::encode_atomic_call(static_cast<std::uint32_t>(30 + order), protocol::AtomicKind::compare_swap,
                                        "w#r1", 8, 0, 7, order));
  record(ordered, 1, 0, protocol::encode_atomic_call(40, protocol::AtomicKind::fetch_add, "w#r1", 12, 1));
  record(ordered, 1, 0, protocol::encode_atomic_call(41, protocol::AtomicKind::fetch_add, "w#r1", 4096, 1));
  write("fuzz_requests", "ordered-copies", ordered);
  // A repair holding the record (and another session refused it), a copy's
  // users and version, the record's runs replaced.
  Bytes repair;
  for (int i : {0, 1, 2, 3}) record(repair, 0, type_of(reqs[static_cast<std::size_t>(i)].first), body(reqs[static_cast<std::size_t>(i)].second));
  record(repair, 0, type_of(MessageType::begin_repair), body({{"name", "w"}}));
  record(repair, 2, type_of(MessageType::begin_repair), body({{"name", "w"}}));
  record(repair, 2, type_of(MessageType::get_layout), body({{"name", "w"}}));
  record(repair, 0, type_of(MessageType::hold_layout), body({{"name", "w"}}));
  record(repair, 0, type_of(MessageType::release_layout), body({{"name", "w"}}));
  record(repair, 0, type_of(MessageType::watch_repairs), body({{"holder", 1}, {"timeout_ms", 5}}));
  record(repair, 0, type_of(MessageType::ack_pause), body({{"holder", 1}, {"name", "w"}, {"epoch", 1}}));
  record(repair, 0, type_of(MessageType::pause_holders), body({{"name", "w"}, {"timeout_ms", 5}}));
  record(repair, 0, type_of(MessageType::segment_digest),
         body({{"name", "w"}, {"offset", 0}, {"length", 4096}, {"chunk", 1024}}));
  record(repair, 0, type_of(MessageType::set_version), body({{"name", "w"}, {"version", 5}}));
  record(repair, 0, type_of(MessageType::end_repair), body({{"name", "w"}, {"instances", Body::array({7})}}));
  write("fuzz_requests", "repair", repair);
  // Who has a copy open, by client identity (a repair's check before its
  // final pass): two sessions of other clients, one holding the record,
  // a watch and an ack for the other's hold (refused: another client's).
  Bytes holders;
  record(holders, 0, type_of(MessageType::hello), body(reqs[0].second));
  record(holders, 2, type_of(MessageType::hello), body({{"client", "libsmb"}, {"id", 0x2e}, {"transport", "ucx"}}));
  for (int i : {1, 2, 3})
    record(holders, 0, type_of(reqs[static_cast<std::size_t>(i)].first),
           body(reqs[static_cast<std::size_t>(i)].second));
  record(holders, 2, type_of(MessageType::open_segment), body({{"name", "w"}}));
  record(holders, 0, type_of(MessageType::segment_clients), body({{"name", "w"}}));
  record(holders, 2, type_of(MessageType::segment_clients), body({{"name", "w#r1"}}));
  record(holders, 0, type_of(MessageType::hold_layout), body({{"name", "w"}}));
  record(holders, 2, type_of(MessageType::watch_repairs), body({{"holder", 1}, {"timeout_ms", 5}}));
  record(holders, 2, type_of(MessageType::ack_pause), body({{"holder", 1}, {"name", "w"}, {"epoch", 1}}));
  record(holders, 0, type_of(MessageType::begin_repair), body({{"name", "w"}}));
  record(holders, 0, type_of(MessageType::pause_holders), body({{"name", "w"}, {"timeout_ms", 5}}));
  write("fuzz_requests", "repair-holders", holders);
  // Stale copies: marks (a copy the layout lacks, the last copy left), and a
  // repair that ends with copies fresh again.
  Bytes stale;
  for (int i : {0, 1, 2, 3}) record(stale, 0, type_of(reqs[static_cast<std::size_t>(i)].first), body(reqs[static_cast<std::size_t>(i)].second));
  record(stale, 0, type_of(MessageType::hold_layout), body({{"name", "w"}}));
  record(stale, 0, type_of(MessageType::watch_repairs), body({{"holder", 1}, {"timeout_ms", 5}}));
  record(stale, 0, type_of(MessageType::mark_stale), body({{"name", "w"}, {"copy", 1}, {"server", 0}, {"why", "x"}}));
  record(stale, 0, type_of(MessageType::mark_stale), body({{"name", "w"}, {"copy", 0}, {"server", 0}}));
  record(stale, 0, type_of(MessageType::begin_repair), body({{"name", "w"}}));
  record(stale, 0, type_of(MessageType::end_repair), body({{"name", "w"}, {"fresh", Body::array({Body::array({1, 0})})}}));
  write("fuzz_requests", "stale-copies", stale);
  // Replaced servers: a replacement told, told again (older: kept), a loop
  // back to the slot's own address, a malformed address, then the map read.
  Bytes replaced;
  record(replaced, 0, type_of(MessageType::hello), body(reqs[0].second));
  record(replaced, 0, type_of(MessageType::replace_server),
         body({{"slot", "10.0.0.4:7000"}, {"address", "10.0.0.9:7000"}, {"epoch", 2}}));
  record(replaced, 0, type_of(MessageType::replace_server),
         body({{"slot", "10.0.0.4:7000"}, {"address", "10.0.0.8:7000"}, {"epoch", 1}}));
  record(replaced, 0, type_of(MessageType::replace_server),
         body({{"slot", "10.0.0.5:7000"}, {"address", "10.0.0.9:7000"}, {"epoch", 1}}));
  record(replaced, 0, type_of(MessageType::replace_server),
         body({{"slot", "10.0.0.4:7000"}, {"address", "10.0.0.4:7000"}, {"epoch", 3}}));
  record(replaced, 0, type_of(MessageType::replace_server), body({{"slot", "x"}, {"address", ""}, {"epoch", 9}}));
  record(replaced, 0, type_of(MessageType::server_map), body(Body::object()));
  record(replaced, 0, type_of(MessageType::hello), body(reqs[0].second));
  write("fuzz_requests", "replaced-servers", replaced);
  // A repair's server-to-server pull, refused before it connects anywhere:
  // no such segment, ranges outside it, malformed ranges and segment.
  Bytes pull;
  for (int i : {0, 1, 2, 3}) record(pull, 0, type_of(reqs[static_cast<std::size_t>(i)].first), body(reqs[static_cast<std::size_t>(i)].second));
  const Body source{{"segment_id", 1}, {"address", 4096}, {"length", 8192}, {"rkey", protocol::binary({1, 2})}};
  const auto pull_of = [&](const char* name, Body ranges) {
    return body({{"name", name}, {"from", "10.0.0.5:7000"}, {"address", protocol::binary({9, 9})},
                 {"ticket", protocol::binary({})}, {"segment", source}, {"ranges", std::move(ranges)}});
  };
  record(pull, 0, type_of(MessageType::pull_copy), pull_of("nothing#r1", Body::array({Body::array({0, 4096})})));
  record(pull, 0, type_of(MessageType::pull_copy), pull_of("w", Body::array({Body::array({0, 1u << 30})})));
  record(pull, 0, type_of(MessageType::pull_copy), pull_of("w", Body::array({Body::array({0})})));
  record(pull, 0, type_of(MessageType::pull_copy), pull_of("w", Body::array({Body::array({4096, 0})})));
  record(pull, 0, type_of(MessageType::pull_copy), body({{"name", "w"}, {"from", ""}, {"segment", 3}}));
  write("fuzz_requests", "pull-copy", pull);
  // smbctl doctor's question: the host's checks, with a body to ignore.
  Bytes diagnose;
  record(diagnose, 0, type_of(reqs[0].first), body(reqs[0].second));
  record(diagnose, 0, type_of(MessageType::diagnose), body(Body::object()));
  record(diagnose, 0, type_of(MessageType::diagnose), body({{"unexpected", Body::array({1, 2})}}));
  write("fuzz_requests", "diagnose", diagnose);
}

// A checkpoint of a 3-byte buffer 'w' (checkpoint_file.hpp), after the
// harness's mode byte: odd, the harness appends the trailer; even, the
// trailer is in the seed.
void checkpoint_seeds() {
  Bytes file;
  for (char c : std::string("SMBCKPT1")) file.push_back(static_cast<std::uint8_t>(c));
  const auto put = [&](std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) file.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  };
  put(1, 4);          // format
  put(1, 4);          // name length
  put(3, 8);          // size
  put(1u << 20, 8);   // stripe unit
  put(7, 8);          // version
  file.push_back('w');
  for (const std::uint8_t b : {std::uint8_t{0x10}, std::uint8_t{0x20}, std::uint8_t{0x30}}) file.push_back(b);
  Bytes trailer_by_harness{1};
  trailer_by_harness.insert(trailer_by_harness.end(), file.begin(), file.end());
  write("fuzz_checkpoint", "appended-trailer", trailer_by_harness);
  const std::uint64_t checksum = XXH64(file.data(), file.size(), smb::checkpoint::kChecksumSeed);
  put(checksum, 8);
  for (char c : std::string("SMBCKEND")) file.push_back(static_cast<std::uint8_t>(c));
  Bytes whole{0};
  whole.insert(whole.end(), file.begin(), file.end());
  write("fuzz_checkpoint", "whole-file", whole);
}

// smbd config files (TOML, read by toml++): every key; and the shapes smbd
// refuses (sections, lists, dates, inline tables), so that the fuzzer starts
// from the error paths too.
void config_seeds() {
  const auto text = [](const std::string& s) { return Bytes(s.begin(), s.end()); };
  write("fuzz_config", "toml",
        text("listen = \"127.0.0.1:7000\"\ncapacity = \"4G\"\ntransport = \"ucx\"\npoll = false\nspin-us = 50\n"
             "log-level = \"info\"\nmax-connections = 100\nhello-timeout = 10\nframe-timeout = 30.5\n"
             "max-segments-per-client = 4096\nmax-layouts-per-client = 4096\n"
             "max-layout-bytes-per-client = 1048576\nmax-locks-per-client = 10000\nlock-grace = 2.5\n"
             "auth-token-file = \"/etc/smb/token\"\nlog-file = \"/var/log/smb/smbd.log\"\n"));
  write("fuzz_config", "refused",
        text("# a comment\n[default]\ncapacity = [1, 2]\nlisten = { host = \"::1\" }\nwhen = 1979-05-27T07:32:00Z\n"
             "'quoted key' = 'literal'\nmulti = \"\"\"\nline\"\"\"\n"));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || argv[1][0] == '-') {  // `--help` is not a directory to fill
    std::cerr << "usage: fuzz_make_seeds DIR (e.g. tests/fuzz/corpus)\n";
    return 2;
  }
  root = argv[1];
  frame_seeds();
  layout_seeds();
  data_channel_seeds();
  request_seeds();
  checkpoint_seeds();
  config_seeds();
  return 0;
}
