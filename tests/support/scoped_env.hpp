#pragma once
// Sets or unsets environment variables for one test and puts the old values
// back afterwards, so a parameterized fixture (UCX_TLS=tcp,self vs default)
// cannot leak its setting into the next test. Servers and tools a test
// spawns inherit the environment at spawn time.
#include <map>
#include <optional>
#include <string>

namespace smb::test {

class ScopedEnv {
 public:
  ScopedEnv() = default;
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

  void set(const std::string& name, const std::string& value);
  void unset(const std::string& name);

 private:
  void remember(const std::string& name);
  std::map<std::string, std::optional<std::string>> saved_;  // first value seen
};

}  // namespace smb::test
