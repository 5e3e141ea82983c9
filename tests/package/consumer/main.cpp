// Uses the installed public headers only: smb.hpp, config.h, and a client
// that finds no server (port 1 on loopback) and says so.
#include <smb/smb.hpp>

#include <iostream>

int main() {
  std::cout << "libsmb " << SMB_VERSION_STRING << ", transports " << SMB_TRANSPORTS << "\n";
  try {
    smb::ClientOptions options;
    options.servers = {"127.0.0.1:1"};
    options.timeout = std::chrono::milliseconds(2000);
    smb::Client client(options);
  } catch (const smb::Error& e) {
    std::cout << "expected: " << e.what() << "\n";
    return e.code() == smb::Errc::unreachable ? 0 : 1;
  }
  std::cerr << "connected to a server on port 1?\n";
  return 1;
}
