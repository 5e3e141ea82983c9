#include "vector_runs.hpp"

namespace smb::server {

namespace {

std::uint64_t work_bytes(const VectorRequest& r) {
  if (r.atomic) return sizeof(std::uint64_t);
  const std::size_t size = element_size(r.type);
  return size == 0 || r.count > UINT64_MAX / size ? UINT64_MAX : r.count * size;
}

// Wakes the version waiters (VersionWaits is thread-safe and costs nothing
// when nobody waits) and reports.
void finish(Services& s, const VectorRequest& r, protocol::FixedReply answer, const VectorDone& done) {
  if (answer.code == Errc::ok && s.versions.pending()) s.versions.advanced(r.name);
  done(std::move(answer));
}

protocol::FixedReply failed(std::uint16_t type) {
  auto error = current_error(type);
  return {error.code, 0, std::move(error.message)};
}

// An ordered op came before the op it follows: it runs again, on the pool,
// once the segment's version gets there (or fails at kReplicaGapTimeout).
void after_gap(Services& s, std::uint16_t type, VectorRequest r, const OrderGap& gap, VectorDone done) {
  auto request = std::make_shared<VectorRequest>(std::move(r));
  // (The wait throws when the segment went meanwhile: answered here, since
  // on the pool nothing above would.)
  try {
    s.versions.wait(kCallSession, request->name, gap.wait_for, kReplicaGapTimeout,
                    [&s, type, request, done](protocol::FixedReply answer) {
                      if (answer.code != Errc::ok) {
                        if (answer.code == Errc::timeout) {
                          try {
                            s.requests.fell_behind(request->name);  // later ordered ops are refused at once
                          } catch (const Error&) {
                            // the segment went meanwhile
                          }
                        }
                        answer.message = "buffer segment '" + request->name + "': op order " +
                                         std::to_string(request->order) + " waited " +
                                         std::to_string(kReplicaGapTimeout.count()) +
                                         " ms for the op before it (its client may have died between replicas): " +
                                         answer.message;
                        return done(std::move(answer));
                      }
                      boost::asio::post(s.workers, [&s, type, request, done] { run_vector_op(s, type, *request, done); });
                    });
  } catch (...) {
    done(failed(type));
  }
}

protocol::FixedReply done_reply(const Applied& applied) { return {Errc::ok, applied.version, {}, applied.old}; }

}  // namespace

void run_vector_op(Services& s, std::uint16_t type, VectorRequest r, VectorDone done) {
  if (!r.atomic) s.metrics.vector_op(r.op, r.type, r.count * element_size(r.type));
  if (work_bytes(r) <= kInlineVectorBytes) {
    std::optional<protocol::FixedReply> answer;
    try {
      if (auto applied = s.requests.apply(r, /*wait=*/false)) answer = done_reply(*applied);
    } catch (const OrderGap& gap) {
      return after_gap(s, type, std::move(r), gap, std::move(done));
    } catch (...) {
      answer = failed(type);
    }
    if (answer) return finish(s, r, std::move(*answer), done);
  }
  boost::asio::post(s.workers, [&s, type, r = std::move(r), done = std::move(done)]() mutable {
    protocol::FixedReply answer;
    try {
      answer = done_reply(*s.requests.apply(r, /*wait=*/true));
    } catch (const OrderGap& gap) {
      return after_gap(s, type, std::move(r), gap, std::move(done));
    } catch (...) {
      answer = failed(type);
    }
    finish(s, r, std::move(answer), done);
  });
}

}  // namespace smb::server
