// smb_test_raw_call SERVER TRANSPORT SEGMENT OFFSET COUNT VALUE: adds VALUE
// to COUNT doubles at byte OFFSET of segment SEGMENT on that one server,
// by one hand-made vector_call (raw_call.hpp), and prints the segment's
// version after it. For tests that need an op on one copy of a replicated
// buffer only, as a client killed between its copies leaves it; run as a
// process of its own so that the test process keeps to the public API.
#include "raw_call.hpp"

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: %s SERVER TRANSPORT SEGMENT OFFSET COUNT VALUE\n", argv[0]);
    return 2;
  }
  try {
    smb::test::RawCallChannel raw(argv[1], argv[2], "smb_test_raw_call");
    const std::uint64_t offset = std::stoull(argv[4]);
    const std::uint64_t count = std::stoull(argv[5]);
    const std::vector<double> x(count, std::stod(argv[6]));
    const auto frame = smb::protocol::encode_vector_call(1, smb::VectorOp::accumulate, smb::DType::f64, offset,
                                                         count, 1.0, argv[3]);
    const auto reply = raw.call(smb::protocol::MessageType::vector_call, frame, std::as_bytes(std::span(x)));
    if (reply.code != smb::Errc::ok) {
      std::fprintf(stderr, "vector_call refused: %s\n", reply.message.c_str());
      return 1;
    }
    std::printf("version %llu\n", static_cast<unsigned long long>(reply.version));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "smb_test_raw_call: %s\n", e.what());
    return 1;
  }
}
