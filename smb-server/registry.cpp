#include "registry.hpp"

namespace smb::server {

void Registry::destroy(const std::string& name) {
  const bool record = catalog_.erase(name);
  const bool segment = store_.unlink(name);
  if (!record && !segment) throw Error(Errc::not_found, "no buffer named '" + name + "' here");
}

void Registry::session_closed(SessionId session) {
  store_.session_closed(session);
  catalog_.session_closed(session);
}

}  // namespace smb::server
