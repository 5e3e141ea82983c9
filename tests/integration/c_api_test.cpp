// The plain C API (smb.h) against real servers: what an FFI user (ctypes,
// Caffe) sees, including error codes and smb_last_error().
#include "fabric.hpp"

#include <smb/smb.h>

#include <gtest/gtest.h>

#include <cstring>
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
  ASSERT_EQ(smb_apply(buffer, 1 /*accumulate*/, 1 /*f32*/, 0, ones.size(), 1.0, ones.data()), 0) << smb_last_error();
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
  EXPECT_EQ(smb_apply(buffer, 9, 1, 0, 1, 1.0, ones.data()), static_cast<int>(smb::Errc::invalid_argument));
  smb_registration* empty = nullptr;
  EXPECT_EQ(smb_register_memory(client, got.data(), 0, &empty), static_cast<int>(smb::Errc::invalid_argument));

  smb_buffer_close(buffer);
  EXPECT_EQ(smb_buffer_destroy(client, "c-api"), 0) << smb_last_error();
  smb_client_free(client);
}

INSTANTIATE_TEST_SUITE_P(Fabrics, CApiTest, testing::ValuesIn(all_fabrics()), fabric_name);

}  // namespace
