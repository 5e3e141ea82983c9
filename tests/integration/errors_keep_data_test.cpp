// A bad call must not damage what is stored: after each kind of rejected
// input, the buffer still reads back exactly the pattern written before it.
// (The codes themselves are checked in error_codes_test.cpp.)
#include "data.hpp"
#include "expect_error.hpp"
#include "fabric.hpp"

#include <smb/client.hpp>

#include <gtest/gtest.h>

#include <optional>

namespace {

using namespace smb::test;
using smb::Errc;

class ErrorsKeepDataTest : public FabricTest {
 protected:
  static constexpr std::uint64_t kSize = 3 * 4096 * 3 + 5;

  void SetUp() override {
    FabricTest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    client_.emplace(make_client());
    smb::BufferOptions options;
    options.stripe_unit = 4096;
    buffer_ = client_->create("data", kSize, options);
    buffer_.write(0, pattern_bytes(0, kSize));
  }

  void TearDown() override {
    buffer_.close();
    client_.reset();
    FabricTest::TearDown();
  }

  // The whole buffer, read by this client and by a fresh one.
  void expect_intact() {
    ByteVec got(kSize);
    buffer_.read(0, got);
    EXPECT_TRUE(holds_pattern(got, 0)) << "read by the writer";
    auto other = make_client();
    ByteVec again(kSize);
    other.open("data").read(0, again);
    EXPECT_TRUE(holds_pattern(again, 0)) << "read by another client";
  }

  std::optional<smb::Client> client_;
  smb::Buffer buffer_;
};

TEST_P(ErrorsKeepDataTest, AfterOutOfRangeWritesAndReads) {
  const auto junk = pattern_bytes(0, 64, 0xFF);
  expect_errc(Errc::out_of_range, [&] { buffer_.write(kSize - 10, junk); }, "write past the end");
  expect_errc(Errc::out_of_range, [&] { buffer_.write(kSize, std::span(junk).first(1)); }, "write at the end");
  ByteVec sink(kSize + 8, std::byte{0xAB});
  expect_errc(Errc::out_of_range, [&] { buffer_.read(0, sink); }, "read past the end");
  expect_errc(Errc::out_of_range, [&] { buffer_.fetch_add(kSize - 5, 1); }, "fetch-add past the end");
  expect_intact();
}

TEST_P(ErrorsKeepDataTest, AfterMisalignedAtomics) {
  expect_errc(Errc::invalid_argument, [&] { buffer_.fetch_add(4, 0xFFFF); }, "fetch-add at 4");
  expect_errc(Errc::invalid_argument, [&] { buffer_.compare_swap(4092, 0, 1); }, "compare-swap at 4092");
  expect_intact();
}

TEST_P(ErrorsKeepDataTest, AfterNameErrors) {
  auto other = make_client();
  expect_errc(Errc::already_exists, [&] { other.create("data", 1 << 20); }, "create over the existing name");
  expect_errc(Errc::not_found, [&] { other.open("other"); }, "open an unknown name");
  expect_errc(Errc::invalid_argument, [&] { other.create("bad name", 64); }, "create with a bad name");
  expect_intact();
}

TEST_P(ErrorsKeepDataTest, AfterNoSpace) {
  const std::uint64_t everything = static_cast<std::uint64_t>(server_count()) * (64u << 20);
  expect_errc(Errc::no_space, [&] { client_->create("huge", everything); }, "create too big");
  if (server_count() > 1) {
    const auto& l = buffer_.layout();
    smb::BufferOptions last_fails;  // see error_codes_test: allocates, then rolls back
    last_fails.stripe_unit = 4096;
    last_fails.servers.assign(l.servers.begin() + 1, l.servers.end());
    last_fails.servers.push_back(l.servers.front());
    const std::uint64_t share = (64u << 20) - 3 * 4096;
    expect_errc(Errc::no_space, [&] { client_->create("huge", share * l.servers.size(), last_fails); },
                "full only on the last server");
  }
  expect_intact();
}

TEST_P(ErrorsKeepDataTest, AfterAFailedCallTheBufferStillWorks) {
  expect_errc(Errc::out_of_range, [&] { buffer_.write(kSize, pattern_bytes(0, 8)); }, "write at the end");
  const auto fresh = pattern_bytes(100, 5000, 0x5A);
  buffer_.write(100, fresh);
  ByteVec got(fresh.size());
  buffer_.read(100, got);
  EXPECT_TRUE(same_bytes(fresh, got, 100));
  buffer_.write(100, pattern_bytes(100, 5000));
  expect_intact();
}

INSTANTIATE_TEST_SUITE_P(Fabrics, ErrorsKeepDataTest, testing::ValuesIn(all_fabrics()), fabric_name);

}  // namespace
