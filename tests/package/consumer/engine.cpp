// A user of the update engine: links smb::engine (which brings smb::smb).
// No server is needed to show that the library is found and linked: a
// client that reaches none is refused before any engine exists.
#include <smb/update_engine.hpp>

#include <iostream>

int main() {
  smb::EngineConfig config;
  config.name = "consumer";
  config.parameters = 16;
  try {
    smb::ClientOptions options;
    options.servers = {"127.0.0.1:1"};
    options.timeout = std::chrono::milliseconds(2000);
    smb::Client client(options);
    smb::UpdateEngine engine(client, config);
  } catch (const smb::Error& e) {
    std::cout << "engine: expected: " << e.what() << "\n";
    return e.code() == smb::Errc::unreachable ? 0 : 1;
  }
  return 1;
}
