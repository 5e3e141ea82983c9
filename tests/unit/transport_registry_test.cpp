// The transport list (transport/registry.hpp): one list that smbd, libsmb
// and smb/config.h agree on, and option checks that name what is accepted.
#include "transport/registry.hpp"

#include <smb/config.h>

#include <gtest/gtest.h>

#include <string>

namespace smb::transport {
namespace {

template <class F>
std::string error_of(F&& f, Errc expected) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), expected) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return {};
}

TEST(TransportRegistry, ListsUcxAndAgreesWithConfigH) {
  std::string joined;
  for (const auto& name : transport_names()) joined += (joined.empty() ? "" : ",") + name;
  EXPECT_EQ(joined, SMB_TRANSPORTS);
  EXPECT_EQ(find_transport("ucx").name, "ucx");
  for (const auto* t : transports()) {
    EXPECT_FALSE(t->summary.empty()) << t->name;
    EXPECT_NE(t->make_server, nullptr) << t->name;
    EXPECT_NE(t->make_client, nullptr) << t->name;
  }
}

TEST(TransportRegistry, AnUnknownNameListsTheTransportsBuilt) {
  const auto message = error_of([] { find_transport("carrier-pigeon"); }, Errc::invalid_argument);
  EXPECT_NE(message.find("'carrier-pigeon'"), std::string::npos) << message;
  EXPECT_NE(message.find("'ucx'"), std::string::npos) << message;
}

TEST(TransportRegistry, OptionsAreCheckedByTheTransportThatTakesThem) {
  auto unknown = error_of([] { make_client_transport("ucx", {{"colour", "blue"}}); }, Errc::invalid_argument);
  EXPECT_NE(unknown.find("no option 'colour'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("'protocol'"), std::string::npos) << unknown;
  auto bad = error_of([] { make_client_transport("ucx", {{"protocol", "sideways"}}); }, Errc::invalid_argument);
  EXPECT_NE(bad.find("auto, rma or am"), std::string::npos) << bad;
  EXPECT_NE(make_client_transport("ucx", {{"protocol", "am"}}), nullptr);
}

TEST(TransportRegistry, ATransportWithoutOptionsRefusesAny) {
  for (const auto* t : transports()) {
    if (!t->options.empty()) continue;
    auto message = error_of([&] { check_options(*t, {{"protocol", "am"}}); }, Errc::invalid_argument);
    EXPECT_NE(message.find("it takes none"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace smb::transport
