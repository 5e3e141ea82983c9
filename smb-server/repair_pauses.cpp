#include "repair_pauses.hpp"

#include "protocol/layout_codec.hpp"
#include "wait_timeout.hpp"

#include <spdlog/spdlog.h>

namespace smb::server {

namespace {
constexpr std::chrono::milliseconds kMaxWatch{60'000};  // a watch answers {} after at most this
}

using protocol::Body;

Body RepairPauses::layout_reply(const std::string& name) const {
  return protocol::ok_reply({{"layout", protocol::layout_to_body(registry_.catalog().get_layout(name))}});
}

Body RepairPauses::hold(SessionId session, const Body& request) {
  const auto name = protocol::get_name(request, "name", "hold_layout");
  const auto layout = registry_.catalog().get_layout(name);
  Body reply{{"layout", protocol::layout_to_body(layout)}};
  auto it = buffers_.find(name);
  if (it != buffers_.end() && it->second.pause) {
    reply["repairing"] = true;  // the open waits (client_core.cpp): the layout changes at the pause's end
  } else if (layout.replicas > 1) {  // only a replicated buffer is ever repaired
    auto& buffer = buffers_[name];
    buffer.holders[session] += 1;
    if (buffer.repair) buffer.repair->untouched = false;
    held_by_[session].insert(name);
    reply["held"] = true;
  }
  return protocol::ok_reply(std::move(reply));
}

Body RepairPauses::release(SessionId session, const Body& request) {
  const auto name = protocol::get_name(request, "name", "release_layout");
  auto it = buffers_.find(name);
  if (it == buffers_.end() || !it->second.holders.contains(session))
    throw Error(Errc::not_found, "release_layout: this client holds no buffer '" + name + "'");
  if (--it->second.holders[session] == 0) drop_holder(name, session);
  return protocol::ok_reply();
}

void RepairPauses::drop_holder(const std::string& name, SessionId holder) {
  auto it = buffers_.find(name);
  if (it == buffers_.end()) return;
  it->second.holders.erase(holder);
  if (auto news = news_.find(holder); news != news_.end()) {
    news->second.erase(name);
    if (news->second.empty()) news_.erase(news);
  }
  if (auto mine = held_by_.find(holder); mine != held_by_.end()) {
    mine->second.erase(name);
    if (mine->second.empty()) {
      held_by_.erase(mine);
      answer_watch(holder, Body{{"stop", true}});  // its watcher has nothing left to watch
    }
  }
  if (it->second.pause)
    complete_if_acked(name);
  else
    forget_if_idle(it);
}

void RepairPauses::forget_if_idle(std::map<std::string, Buffer>::iterator it) {
  if (it->second.holders.empty() && !it->second.pause && !it->second.repair) buffers_.erase(it);
}

std::size_t RepairPauses::repair_began(SessionId repairer, const std::string& name) {
  auto& buffer = buffers_[name];
  buffer.repair = Repair{repairer, buffer.holders.empty()};
  return buffer.holders.size();
}

void RepairPauses::answer_watch(SessionId holder, Body body) {
  auto it = watches_.find(holder);
  if (it == watches_.end()) return;
  auto watch = std::move(it->second);
  watches_.erase(it);
  watch.timer->cancel();
  watch.reply(protocol::ok_reply(std::move(body)));
}

void RepairPauses::stale_marked(const std::string& name) {
  auto it = buffers_.find(name);
  if (it == buffers_.end()) return;
  std::vector<SessionId> holders;  // copied: an answer may end a session, and with it a hold
  for (const auto& [holder, opens] : it->second.holders) holders.push_back(holder);
  for (const auto holder : holders) {
    if (!held_by_.contains(holder)) continue;  // it went meanwhile
    news_[holder].insert(name);
    tell_news(holder);
  }
}

void RepairPauses::tell_news(SessionId holder) {
  auto news = news_.find(holder);
  if (news == news_.end() || !watches_.contains(holder)) return;
  const auto name = *news->second.begin();
  news->second.erase(news->second.begin());
  if (news->second.empty()) news_.erase(news);
  try {
    answer_watch(holder, Body{{"stale", name}, {"layout", protocol::layout_to_body(registry_.catalog().get_layout(name))}});
  } catch (const Error&) {
    // destroyed meanwhile: nothing to tell
  }
}

void RepairPauses::ask(SessionId holder, const std::string& name, std::uint64_t epoch) {
  answer_watch(holder, Body{{"name", name}, {"epoch", epoch}});
}

void RepairPauses::watch(SessionId session, const Body& request, const ReplyFn& reply) {
  const char* what = "watch_repairs";
  const SessionId holder = protocol::get_u64(request, "holder", what);
  const auto wait = std::min(wait_timeout(request, "timeout_ms", what), kMaxWatch);
  auto mine = held_by_.find(holder);
  // Another client's session (a number this server gave anew after a
  // restart, say): not this watcher's to answer for.
  if (mine == held_by_.end() || identities_.of(holder) != identities_.of(session))
    return reply(protocol::ok_reply({{"stop", true}}));
  // A pause that asks this holder and has no answer from it yet: at once.
  for (const auto& name : mine->second) {
    const auto& pause = buffers_.at(name).pause;
    if (pause && !pause->acked.contains(holder))
      return reply(protocol::ok_reply({{"name", name}, {"epoch", pause->epoch}}));
  }
  answer_watch(holder, Body::object());  // one watch per holder: an older one ends empty
  auto timer = std::make_shared<boost::asio::steady_timer>(io_, wait);
  timer->async_wait([this, holder, timer](const boost::system::error_code& ec) {
    if (ec) return;
    auto it = watches_.find(holder);
    if (it != watches_.end() && it->second.timer == timer) answer_watch(holder, Body::object());
  });
  watches_[holder] = Watch{session, reply, std::move(timer)};
  tell_news(holder);
}

void RepairPauses::ack(SessionId session, const Body& request, const ReplyFn& reply) {
  const char* what = "ack_pause";
  const SessionId holder = protocol::get_u64(request, "holder", what);
  const auto name = protocol::get_name(request, "name", what);
  const auto epoch = protocol::get_u64(request, "epoch", what);
  auto it = buffers_.find(name);
  // A pause that ended already (failed, or its repairer went): go on at
  // once. Only a holder's own client acks for it.
  if (it == buffers_.end() || !it->second.pause || it->second.pause->epoch != epoch ||
      !it->second.holders.contains(holder) || identities_.of(holder) != identities_.of(session))
    return reply(layout_reply(name));
  it->second.pause->acked.insert(holder);
  it->second.pause->acks.emplace_back(session, reply);
  complete_if_acked(name);
}

void RepairPauses::pause(SessionId session, const Body& request, const ReplyFn& reply) {
  const char* what = "pause_holders";
  const auto name = protocol::get_name(request, "name", what);
  const auto wait = wait_timeout(request, "timeout_ms", what);
  registry_.catalog().check_repairer(session, name);
  auto& buffer = buffers_[name];
  if (buffer.pause) throw Error(Errc::busy, "pause_holders: '" + name + "' is paused already");
  auto timer = std::make_shared<boost::asio::steady_timer>(io_, wait);
  buffer.pause = Pause{next_epoch_++, session, {}, reply, timer, {}};
  timer->async_wait([this, name, timer, wait](const boost::system::error_code& ec) {
    if (ec) return;
    auto it = buffers_.find(name);
    if (it == buffers_.end() || !it->second.pause || it->second.pause->timer != timer) return;
    const auto& pause = *it->second.pause;
    if (!pause.answer_repairer) return;  // every holder answered: the pause lasts until end_repair
    std::string late;
    std::size_t count = 0;
    for (const auto& [holder, opens] : it->second.holders)
      if (!pause.acked.contains(holder)) late += (count++ == 0 ? "" : ", ") + std::to_string(holder);
    end_pause(name, std::to_string(count) + " client(s) holding it open (sessions " + late +
                        ") did not pause their writes within " + std::to_string(wait.count()) +
                        " ms (a client of an older libsmb, or one that is stuck)");
  });
  for (const auto& [holder, opens] : buffer.holders) ask(holder, name, buffer.pause->epoch);
  complete_if_acked(name);
}

void RepairPauses::complete_if_acked(const std::string& name) {
  auto& buffer = buffers_.at(name);
  auto& pause = *buffer.pause;
  if (!pause.answer_repairer) return;
  for (const auto& [holder, opens] : buffer.holders)
    if (!pause.acked.contains(holder)) return;
  auto answer = std::move(pause.answer_repairer);
  pause.answer_repairer = nullptr;
  Body clients = Body::array();
  for (const auto& [holder, opens] : buffer.holders) clients.push_back(identities_.of(holder));
  const bool untouched = buffer.repair && buffer.repair->repairer == pause.repairer && buffer.repair->untouched;
  answer(protocol::ok_reply(
      {{"holders", buffer.holders.size()}, {"clients", std::move(clients)}, {"untouched", untouched}}));
}

void RepairPauses::end_pause(const std::string& name, const std::optional<std::string>& failure) {
  auto it = buffers_.find(name);
  if (it == buffers_.end() || !it->second.pause) return;
  auto pause = std::move(*it->second.pause);
  it->second.pause.reset();
  pause.timer->cancel();
  if (pause.answer_repairer && failure) pause.answer_repairer(protocol::error_reply(Errc::busy, *failure));
  Body layout;
  try {
    layout = layout_reply(name);
  } catch (const Error& e) {  // destroyed meanwhile: the holders' next op says so
    layout = protocol::error_reply(e.code(), e.what());
  }
  for (auto& [watcher, answer] : pause.acks) answer(layout);
  forget_if_idle(it);
}

void RepairPauses::resume(const std::string& name) {
  end_pause(name, std::nullopt);
  if (auto it = buffers_.find(name); it != buffers_.end()) {
    it->second.repair.reset();
    forget_if_idle(it);
  }
}

void RepairPauses::session_closed(SessionId session) {
  news_.erase(session);
  if (auto mine = held_by_.find(session); mine != held_by_.end()) {
    const auto names = mine->second;  // copy: drop_holder edits it
    for (const auto& name : names) drop_holder(name, session);
  }
  for (auto it = watches_.begin(); it != watches_.end();) {
    if (it->second.watcher == session) {
      it->second.timer->cancel();
      it = watches_.erase(it);  // nobody left to answer
    } else {
      ++it;
    }
  }
  std::vector<std::string> abandoned;
  for (auto it = buffers_.begin(); it != buffers_.end();) {
    auto current = it++;  // forget_if_idle may erase it
    if (current->second.repair && current->second.repair->repairer == session) {
      current->second.repair.reset();
      forget_if_idle(current);
    }
  }
  for (auto& [name, buffer] : buffers_) {
    if (!buffer.pause) continue;
    std::erase_if(buffer.pause->acks, [&](const auto& ack) { return ack.first == session; });
    if (buffer.pause->repairer == session) abandoned.push_back(name);
  }
  for (const auto& name : abandoned) {
    spdlog::info("repair of '{}' ended with its client's connection: its holders go on unrepaired", name);
    auto& pause = *buffers_.at(name).pause;
    pause.answer_repairer = nullptr;
    end_pause(name, std::nullopt);
  }
}

}  // namespace smb::server
