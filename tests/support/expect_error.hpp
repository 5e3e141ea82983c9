#pragma once
// Checks that an operation fails with a given smb::Errc (and not with some
// other exception type, or silently). Returns the error text so a test can
// also check that the message names the buffer, the server or the op.
#include <smb/error.hpp>

#include <gtest/gtest.h>

#include <string>

namespace smb::test {

template <class F>
std::string expect_errc(Errc code, F&& f, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << what << ": succeeded, expected error '" << errc_name(code) << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << what << ": got '" << errc_name(e.code()) << "': " << e.what();
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": threw a non-smb exception: " << e.what();
  }
  return {};
}

// `text` mentions `part`.
inline testing::AssertionResult mentions(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return testing::AssertionSuccess();
  return testing::AssertionFailure() << "'" << text << "' does not mention '" << part << "'";
}

}  // namespace smb::test
