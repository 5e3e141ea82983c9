// The plain C API (smb.h) against real servers: what an FFI user (ctypes,
// Caffe) sees, including error codes and smb_last_error().
#include "fabric.hpp"

#include <smb/smb.h>

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

namespace {

using namespace smb::test;

class CApiTest : public FabricTest {};

TEST_P(CApiTest, RoundTripAtomicsVectorOpsAndCoordination) {
  smb_client* client = nullptr;
  ASSERT_EQ(smb_client_connect(server_list().c_str(), 5000, &client), 0) << smb_last_error();
  smb_buffer* buffer = nullptr;
  ASSERT_EQ(smb_buffer_create(client, "c-api", 3 * 4096, 4096, &buffer), 0) << smb_last_error();
  EXPECT_EQ(smb_buffer_size(buffer), 3u * 4096);

  std::vector<float> ones(3 * 1024, 1.0f), got(3 * 1024);
  smb_registration* registration = nullptr;  // `got` in place, where the transport can
  ASSERT_EQ(smb_register_memory(client, got.data(), got.size() * 4, &registration), 0) << smb_last_error();
  ASSERT_EQ(smb_write(buffer, 0, ones.data(), ones.size() * 4), 0) << smb_last_error();
  ASSERT_EQ(smb_apply(buffer, SMB_OP_ACCUMULATE, SMB_F32, 0, ones.size(), 1.0, ones.data()), 0) << smb_last_error();
  smb_request* request = nullptr;
  ASSERT_EQ(smb_read_async(buffer, 0, got.data(), got.size() * 4, &request), 0);
  ASSERT_EQ(smb_request_wait(request), 0) << smb_last_error();
  EXPECT_EQ(got, std::vector<float>(got.size(), 2.0f));
  smb_unregister_memory(registration);
  uint64_t version = 0;
  ASSERT_EQ(smb_buffer_version(buffer, &version), 0);
  EXPECT_EQ(version, 1u);

  uint64_t old = 99;
  ASSERT_EQ(smb_fetch_add(buffer, 8, 5, &old), 0) << smb_last_error();
  EXPECT_EQ(old, 0x4000000040000000u);  // the word holding two floats of 2.0f (0x40000000 each)
  smb_lock* lock = nullptr;
  ASSERT_EQ(smb_lock_acquire(client, "c-api-lock", 1000, 1000, &lock), 0) << smb_last_error();
  EXPECT_EQ(smb_lock_release(lock), 0) << smb_last_error();
  EXPECT_EQ(smb_barrier(client, "c-api-barrier", 1, 1000), 0) << smb_last_error();

  smb_buffer* missing = nullptr;
  EXPECT_EQ(smb_buffer_open(client, "no-such-buffer", &missing), static_cast<int>(smb::Errc::not_found));
  EXPECT_NE(std::strstr(smb_last_error(), "no-such-buffer"), nullptr) << smb_last_error();
  EXPECT_EQ(smb_apply(buffer, static_cast<smb_vector_op>(0), SMB_F32, 0, 1, 1.0, ones.data()), SMB_EINVAL);
  EXPECT_STREQ(smb_errc_name(SMB_EINVAL), "invalid argument");
  EXPECT_STREQ(smb_errc_name(SMB_EGONE), "server gone");
  EXPECT_STREQ(smb_errc_name(99), "unknown error");
  smb_registration* empty = nullptr;
  EXPECT_EQ(smb_register_memory(client, got.data(), 0, &empty), static_cast<int>(smb::Errc::invalid_argument));

  smb_buffer_close(buffer);
  EXPECT_EQ(smb_buffer_destroy(client, "c-api"), 0) << smb_last_error();
  smb_client_free(client);
}

TEST_P(CApiTest, ReplicatedBuffersKeepTheirBytesWithoutAServer) {
  if (server_count() < 2) GTEST_SKIP() << "two copies need two servers; the 3-server fabrics run this";
  smb_client* client = nullptr;
  ASSERT_EQ(smb_client_connect(server_list().c_str(), 5000, &client), 0) << smb_last_error();
  smb_buffer* buffer = nullptr;
  EXPECT_EQ(smb_buffer_create_replicated(client, "c-rep", 3 * 4096, 4096, 9, &buffer), SMB_EINVAL);
  ASSERT_EQ(smb_buffer_create_replicated(client, "c-rep", 3 * 4096, 4096, 2, &buffer), SMB_OK) << smb_last_error();
  std::vector<std::uint8_t> data(3 * 4096), got(data.size());
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::uint8_t>(i * 7);
  ASSERT_EQ(smb_write(buffer, 0, data.data(), data.size()), SMB_OK) << smb_last_error();
  server(2).kill();
  ASSERT_EQ(smb_read(buffer, 0, got.data(), got.size()), SMB_OK) << smb_last_error();
  EXPECT_EQ(got, data);
  smb_buffer_close(buffer);
  smb_client_free(client);
  // A client that starts with the server down, every server on its list, opens it too.
  ASSERT_EQ(smb_client_connect(server_list().c_str(), 5000, &client), 0) << smb_last_error();
  ASSERT_EQ(smb_buffer_open(client, "c-rep", &buffer), SMB_OK) << smb_last_error();
  std::fill(got.begin(), got.end(), 0);
  ASSERT_EQ(smb_read(buffer, 0, got.data(), got.size()), SMB_OK) << smb_last_error();
  EXPECT_EQ(got, data);
  smb_buffer_close(buffer);
  smb_client_free(client);
}

// Every handle, name and out-pointer may be NULL: SMB_EINVAL naming the
// argument, never a crash (smb_buffer_create(c, NULL, ...) segfaulted before).
TEST_P(CApiTest, NullArgumentsAreEinval) {
  smb_client* client = nullptr;
  ASSERT_EQ(smb_client_connect(server_list().c_str(), 5000, &client), SMB_OK) << smb_last_error();
  smb_buffer* buffer = nullptr;
  ASSERT_EQ(smb_buffer_create(client, "c-null", 4096, 0, &buffer), SMB_OK) << smb_last_error();
  std::vector<std::uint8_t> bytes(64);
  std::uint64_t value = 0;
  smb_request* request = nullptr;
  smb_lock* lock = nullptr;
  smb_registration* registration = nullptr;
  const std::vector<std::pair<const char*, int>> calls = {
      {"connect out", smb_client_connect(server_list().c_str(), 5000, nullptr)},
      {"create client", smb_buffer_create(nullptr, "x", 4096, 0, &buffer)},
      {"create name", smb_buffer_create(client, nullptr, 4096, 0, &buffer)},
      {"create out", smb_buffer_create(client, "x", 4096, 0, nullptr)},
      {"open name", smb_buffer_open(client, nullptr, &buffer)},
      {"open client", smb_buffer_open(nullptr, "c-null", &buffer)},
      {"destroy name", smb_buffer_destroy(client, nullptr)},
      {"write buffer", smb_write(nullptr, 0, bytes.data(), bytes.size())},
      {"write data", smb_write(buffer, 0, nullptr, 8)},
      {"read out", smb_read(buffer, 0, nullptr, 8)},
      {"write_async out", smb_write_async(buffer, 0, bytes.data(), 8, nullptr)},
      {"read_async buffer", smb_read_async(nullptr, 0, bytes.data(), 8, &request)},
      {"request", smb_request_wait(nullptr)},
      {"fetch_add old", smb_fetch_add(buffer, 0, 1, nullptr)},
      {"compare_swap buffer", smb_compare_swap(nullptr, 0, 0, 1, &value)},
      {"apply_from source", smb_apply_from(buffer, SMB_OP_ACCUMULATE, SMB_F32, 0, 1, 1.0, nullptr, 0)},
      {"version out", smb_buffer_version(buffer, nullptr)},
      {"wait_version buffer", smb_wait_version(nullptr, 1, 10, &value)},
      {"lock name", smb_lock_acquire(client, nullptr, 100, 100, &lock)},
      {"lock out", smb_lock_acquire(client, "l", 100, 100, nullptr)},
      {"unlock", smb_lock_release(nullptr)},
      {"barrier client", smb_barrier(nullptr, "b", 1, 100)},
      {"register base", smb_register_memory(client, nullptr, 64, &registration)},
      {"save path", smb_buffer_save(client, "c-null", nullptr)},
      {"load client", smb_buffer_load(nullptr, "f", nullptr, &buffer)},
      {"load out", smb_buffer_load(client, "f", nullptr, nullptr)},
  };
  for (const auto& [what, rc] : calls) EXPECT_EQ(rc, SMB_EINVAL) << what << ": " << smb_last_error();
  EXPECT_EQ(smb_buffer_size(nullptr), 0u);
  smb_buffer_close(nullptr);
  smb_client_free(nullptr);
  smb_unregister_memory(nullptr);
  EXPECT_EQ(smb_write(buffer, 0, bytes.data(), bytes.size()), SMB_OK) << "the buffer still works";
  smb_buffer_close(buffer);
  EXPECT_EQ(smb_buffer_destroy(client, "c-null"), SMB_OK);
  smb_client_free(client);
}

// A checkpoint through the C API: saved, restored under another name, and
// a damaged file refused with SMB_EINVAL and a message naming it.
TEST_P(CApiTest, SaveAndLoadACheckpoint) {
  smb_client* client = nullptr;
  ASSERT_EQ(smb_client_connect(server_list().c_str(), 5000, &client), SMB_OK) << smb_last_error();
  smb_buffer* buffer = nullptr;
  ASSERT_EQ(smb_buffer_create(client, "c-ckpt", 3 * 4096, 4096, &buffer), SMB_OK) << smb_last_error();
  std::vector<std::uint8_t> bytes(3 * 4096);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(i * 7);
  ASSERT_EQ(smb_write(buffer, 0, bytes.data(), bytes.size()), SMB_OK) << smb_last_error();
  const std::string path = "/tmp/smb-c-api-" + std::to_string(::getpid()) + ".ckpt";
  ASSERT_EQ(smb_buffer_save(client, "c-ckpt", path.c_str()), SMB_OK) << smb_last_error();
  smb_buffer* copy = nullptr;
  ASSERT_EQ(smb_buffer_load(client, path.c_str(), "c-ckpt-copy", &copy), SMB_OK) << smb_last_error();
  std::vector<std::uint8_t> got(bytes.size());
  ASSERT_EQ(smb_read(copy, 0, got.data(), got.size()), SMB_OK) << smb_last_error();
  EXPECT_EQ(got, bytes);
  { std::ofstream(path, std::ios::binary | std::ios::in | std::ios::out).seekp(100).put('\x55'); }
  smb_buffer* bad = nullptr;
  EXPECT_EQ(smb_buffer_load(client, path.c_str(), "c-ckpt-bad", &bad), SMB_EINVAL);
  EXPECT_NE(std::string(smb_last_error()).find(path), std::string::npos) << smb_last_error();
  std::remove(path.c_str());
  smb_buffer_close(copy);
  smb_buffer_close(buffer);
  smb_client_free(client);
}

INSTANTIATE_TEST_SUITE_P(Fabrics, CApiTest, testing::ValuesIn(all_fabrics()), fabric_name);

}  // namespace
