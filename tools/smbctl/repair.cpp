// smbctl repair [NAME] [--watch]: rebuilds the copies that restarted servers
// lost and those recorded stale (Client::repair), for one buffer or every
// replicated buffer listed;
// --watch does so every interval until stopped (the automatic mode).
// --onto SPARE replaces a server lost for good by the new smbd at SPARE
// first (Client::replace_server), so the repair rebuilds its copies there;
// with --watch, each server unreachable for --replace-after seconds takes
// the next spare.
#include "commands.hpp"

#include <smb/error.hpp>
#include <util/parse.hpp>

#include <nlohmann/json.hpp>
#include <spdlog/fmt/fmt.h>

#include <chrono>
#include <iostream>
#include <optional>
#include <set>
#include <thread>

namespace smb::smbctl {
namespace {

// One buffer's repair: what was done, or why it could not be.
struct Outcome {
  RepairReport report;
  std::string result;  // "repaired", "whole", "busy", "lost", "waiting"
  std::string error;
  bool degraded() const { return result != "repaired" && result != "whole"; }
};

Outcome repair_one(Client& client, const std::string& name) {
  Outcome out;
  out.report.name = name;
  try {
    out.report = client.repair(name);
    const bool did = !out.report.repaired.empty() || !out.report.records_restored.empty();
    out.result = !out.report.unreachable.empty() ? "waiting" : did ? "repaired" : "whole";
    if (!out.report.unreachable.empty()) out.error = "servers unreachable: copies there wait for them";
  } catch (const Error& e) {
    if (e.code() != Errc::busy && e.code() != Errc::data_lost && e.code() != Errc::server_gone) throw;
    out.result = e.code() == Errc::busy ? "busy" : "lost";
    out.error = e.what();
  }
  return out;
}

// The buffers a pass looks at: NAME, or every replicated one listed.
std::vector<std::string> targets(Client& client, const std::string& name) {
  if (!name.empty()) return {name};
  std::vector<std::string> names;
  for (const auto& layout : client.list())
    if (layout.replicas > 1) names.push_back(layout.name);
  return names;
}

// Buffers of one copy whose stripes a restarted server took with it: no
// repair rebuilds them, and a pass that said nothing of them would read as
// "all is well".
std::vector<Outcome> lost_single_copies(Client& client) {
  std::vector<Outcome> out;
  for (const auto& layout : client.list()) {
    if (layout.replicas > 1) continue;
    const auto state = buffer_state(layout, client.check(layout));
    if (!state.starts_with("lost")) continue;
    Outcome o;
    o.report.name = layout.name;
    o.result = "lost";
    o.error = state + "; it has one copy, which no repair can rebuild: smbctl rm " + layout.name +
              " and load a checkpoint (smbctl load FILE " + layout.name +
              "), and keep 2 copies of what must outlive a server (--replicas 2)";
    out.push_back(std::move(o));
  }
  return out;
}

double rate_mib(const RepairReport& r) {
  return r.seconds > 0 ? static_cast<double>(r.bytes) / r.seconds / (1024.0 * 1024.0) : 0.0;
}

nlohmann::json to_json(const Outcome& o) {
  auto copies = nlohmann::json::array();
  for (const auto& c : o.report.repaired)
    copies.push_back({{"server", c.server},
                      {"replica", c.replica},
                      {"source", c.source},
                      {"bytes", c.bytes},
                      {"server_to_server", c.server_to_server}});
  nlohmann::json j{{"name", o.report.name},
                   {"result", o.result},
                   {"repaired", copies},
                   {"bytes", o.report.bytes},
                   {"recopied", o.report.recopied},
                   {"clients_paused", o.report.clients_paused},
                   {"paused_seconds", o.report.paused_seconds},
                   {"seconds", o.report.seconds},
                   {"records_restored", o.report.records_restored},
                   {"unreachable", o.report.unreachable}};
  if (!o.error.empty()) j["error"] = o.error;
  return j;
}

std::string line(const Outcome& o) {
  std::string text = "buffer '" + o.report.name + "': " + o.result;
  if (!o.report.repaired.empty()) {
    text += fmt::format(": {} copies ({}) in {:.2f} s, {:.0f} MiB/s", o.report.repaired.size(),
                        util::format_bytes(o.report.bytes), o.report.seconds, rate_mib(o.report));
    if (o.report.recopied > 0) text += fmt::format(", {} recopied (written during the copy)", util::format_bytes(o.report.recopied));
    if (o.report.clients_paused > 0)
      text += fmt::format("; {} client(s) with it open paused {:.3f} s for the final pass", o.report.clients_paused,
                          o.report.paused_seconds);
    for (const auto& c : o.report.repaired)
      text += "\n  copy " + std::to_string(c.replica) + " on " + c.server + " from " + c.source +
              (c.server_to_server ? " (server to server)" : " (through this client)");
  }
  for (const auto& keeper : o.report.records_restored) text += "\n  layout record written back to " + keeper;
  if (!o.error.empty()) text += ": " + o.error;
  return text;
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

struct Replaced {
  std::string server, by;
  std::vector<std::string> told;
  nlohmann::json to_json() const { return {{"server", server}, {"by", by}, {"told", told}}; }
};

std::string line(const Replaced& r, std::size_t servers) {
  return "server " + r.server + " replaced: served at " + r.by + " from now on (" + std::to_string(r.told.size()) +
         " of " + std::to_string(servers) + " servers told)";
}

// One pass's replacement: `lost`, or the one server unreachable, by the first spare.
Replaced replace_lost(Client& client, const Replacing& replacing) {
  auto lost = replacing.lost;
  if (lost.empty()) {
    std::vector<std::string> down;
    for (const auto& [server, why] : client.unreachable_servers()) down.push_back(server);
    if (down.empty()) throw Error(Errc::invalid_argument, "--onto: no server is lost, so none is replaced");
    if (down.size() > 1)
      throw Error(Errc::invalid_argument, "--onto: servers " + joined(down) + " are unreachable: say which one " +
                                              "--onto replaces with --replace");
    lost = down.front();
  }
  return {lost, replacing.spares[0], client.replace_server(lost, replacing.spares[0])};
}

}  // namespace

bool repair_buffers(Client& client, const std::string& name, bool json, const Replacing& replacing) {
  std::optional<Replaced> replaced;
  if (!replacing.spares.empty()) replaced = replace_lost(client, replacing);
  std::vector<Outcome> outcomes;
  for (const auto& n : targets(client, name)) outcomes.push_back(repair_one(client, n));
  if (name.empty())
    for (auto& o : lost_single_copies(client)) outcomes.push_back(std::move(o));
  bool degraded = !client.unreachable_servers().empty();
  for (const auto& o : outcomes) degraded = degraded || o.degraded();
  if (json) {
    auto list = nlohmann::json::array();
    for (const auto& o : outcomes) list.push_back(to_json(o));
    nlohmann::json doc{{"buffers", list}, {"degraded", degraded}};
    if (replaced) doc["replaced"] = replaced->to_json();
    std::cout << doc.dump(2) << '\n';
  } else {
    if (replaced) std::cout << line(*replaced, client.servers().size()) << '\n';
    if (outcomes.empty()) std::cout << "no replicated buffers to repair, and none lost\n";
    for (const auto& o : outcomes) std::cout << line(o) << '\n';
    print_unreachable(client.unreachable_servers(), std::cout);
  }
  return degraded;
}

namespace {

// --watch --onto: a server unreachable for `after` takes the next spare.
class SpareKeeper {
 public:
  explicit SpareKeeper(Replacing replacing) : replacing_(std::move(replacing)) {}

  void pass(Client& client, bool json) {
    const auto now = std::chrono::steady_clock::now();
    const auto down = client.unreachable_servers();
    std::erase_if(since_, [&](const auto& entry) { return !down.contains(entry.first); });
    for (const auto& [server, why] : down) {
      const auto first = since_.try_emplace(server, now).first->second;
      if (replacing_.spares.empty() || now - first < replacing_.after) continue;
      if (!replacing_.lost.empty() && replacing_.lost != server) continue;
      const auto spare = replacing_.spares.front();
      try {
        const Replaced done{server, spare, client.replace_server(server, spare)};
        std::cout << (json ? nlohmann::json{{"replaced", done.to_json()}}.dump() : line(done, client.servers().size()))
                  << std::endl;
        replacing_.spares.erase(replacing_.spares.begin());
        since_.erase(server);
        if (replacing_.spares.empty()) std::cout << "no spare servers left for --onto" << std::endl;
      } catch (const Error& e) {
        const std::string said = server + e.what();
        if (said != refused_) std::cerr << "smbctl repair: " << e.what() << std::endl;
        refused_ = said;
      }
    }
  }

 private:
  Replacing replacing_;
  std::map<std::string, std::chrono::steady_clock::time_point> since_;  // unreachable since
  std::string refused_;  // the last refusal said (said once)
};

}  // namespace

[[noreturn]] void watch_repairs(const ClientOptions& options, const std::string& name, bool json,
                                std::chrono::milliseconds every, Replacing replacing) {
  std::map<std::string, std::string> last;  // buffer -> last result reported
  std::set<std::string> unreachable;         // servers last reported unreachable
  SpareKeeper spares(std::move(replacing));
  for (;;) {
    try {
      // A fresh client each pass: a server that restarted is reached anew.
      Client client(options);
      spares.pass(client, json);
      for (const auto& n : targets(client, name)) {
        const auto o = repair_one(client, n);
        const auto said = o.result + o.error;
        if (o.result == "whole" && !last.contains(n)) continue;
        if (last[n] == said && o.result != "repaired") continue;  // say a lasting state once
        last[n] = said;
        std::cout << (json ? to_json(o).dump() : line(o)) << std::endl;
      }
      // Servers down (whose buffers' layouts it cannot even list): said when that changes.
      const auto now = client.unreachable_servers();
      std::set<std::string> down;
      for (const auto& [server, why] : now) down.insert(server);
      if (down != unreachable) {
        if (json)
          std::cout << nlohmann::json{{"unreachable", now}}.dump() << std::endl;
        else if (now.empty())
          std::cout << "every server is reachable again" << std::endl;
        else
          print_unreachable(now, std::cout);
        std::cout.flush();
        unreachable = std::move(down);
      }
    } catch (const Error& e) {
      std::cerr << "smbctl repair: " << e.what() << '\n';
    }
    std::this_thread::sleep_for(every);
  }
}

}  // namespace smb::smbctl
