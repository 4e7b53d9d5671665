#include "pipeline/runtime/gloo_transport.h"

#include <cstring>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collective/gloo_bootstrap.h"
#include "common/status.h"
#include "gloo/context.h"
#include "gloo/transport/unbound_buffer.h"

namespace yoke::pipeline {
namespace {

// A message's slot: its kind and micro-batch (the sender is Gloo's own).
uint64_t Slot(MessageKind kind, int micro_batch) {
  return (static_cast<uint64_t>(kind) << 32) | static_cast<uint32_t>(micro_batch);
}

}  // namespace

absl::StatusOr<std::unique_ptr<GlooTransport>> GlooTransport::Create(
    collective::Store* store, int stage, int stages, const collective::GlooOptions& options,
    absl::Duration timeout) {
  if (stages < 1 || stage < 0 || stage >= stages) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline: stage ", stage, " is not one of ", stages, " stages"));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<gloo::Context> context,
                   collective::ConnectGloo(store, stage, stages, options));
  return std::unique_ptr<GlooTransport>(new GlooTransport(std::move(context), stage, timeout));
}

GlooTransport::GlooTransport(std::shared_ptr<gloo::Context> context, int stage,
                             absl::Duration timeout)
    : context_(std::move(context)), stage_(stage), timeout_(timeout) {}

GlooTransport::~GlooTransport() {
  for (auto& [key, o] : out_) (void)WaitSent(key, o);
}

absl::Status GlooTransport::WaitSent(const Key& key, Outgoing& o) {
  if (!o.in_flight) return absl::OkStatus();
  o.in_flight = false;
  const auto [to, kind, mb] = key;
  // Named only on failure: a message's steady state allocates nothing.
  auto what = [&, to = to, kind = kind, mb = mb] {
    return MessageName(stage_, to, static_cast<MessageKind>(kind), mb);
  };
  try {
    if (!o.buffer->waitSend(collective::ToChronoMs(timeout_))) {
      return absl::AbortedError(absl::StrCat("pipeline: sending ", what(), " was aborted"));
    }
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("pipeline: sending ", what(), " failed: ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status GlooTransport::Send(int to, MessageKind kind, int micro_batch,
                                 const engine::Tensor& t) {
  if (to < 0 || to >= context_->size || std::abs(to - stage_) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline: stage ", stage_,
                                                   " may only send to a neighbour, not to stage ",
                                                   to, " of ", context_->size));
  }
  const Key key{to, static_cast<int>(kind), micro_batch};
  Outgoing& o = out_[key];
  // The same message of the last step must be out before its buffer is
  // reused (it is: its receiver consumed it before this step could start).
  RETURN_IF_ERROR(WaitSent(key, o));
  const size_t bytes = static_cast<size_t>(t.numel()) * sizeof(float);
  if (o.values.size() != static_cast<size_t>(t.numel()) || o.buffer == nullptr) {
    o.values.resize(t.numel());
    o.buffer = context_->createUnboundBuffer(o.values.data(), bytes);
  }
  std::memcpy(o.values.data(), t.data<float>(), bytes);
  try {
    o.buffer->send(to, Slot(kind, micro_batch));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "pipeline: sending ", MessageName(stage_, to, kind, micro_batch), " failed: ", e.what()));
  }
  o.in_flight = true;
  return absl::OkStatus();
}

absl::Status GlooTransport::Recv(int from, MessageKind kind, int micro_batch, engine::Tensor* dst) {
  auto what = [&] { return MessageName(from, stage_, kind, micro_batch); };
  if (from < 0 || from >= context_->size || std::abs(from - stage_) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline: stage ", stage_, " may only receive from a neighbour: ", what()));
  }
  try {
    // One buffer per message, made again only when the destination moves
    // (a training step's receives land in the runner's per-set buffers).
    Incoming& in = in_[Key{from, static_cast<int>(kind), micro_batch}];
    const size_t bytes = static_cast<size_t>(dst->numel()) * sizeof(float);
    if (in.buffer == nullptr || in.data != dst->data<float>() || in.bytes != bytes) {
      in.buffer = context_->createUnboundBuffer(dst->data<float>(), bytes);
      in.data = dst->data<float>();
      in.bytes = bytes;
    }
    in.buffer->recv(from, Slot(kind, micro_batch));
    if (!in.buffer->waitRecv(collective::ToChronoMs(timeout_))) {
      return absl::AbortedError(absl::StrCat("pipeline: receiving ", what(), " was aborted"));
    }
  } catch (const std::exception& e) {
    const std::string why = e.what();
    if (collective::IsGlooTimeout(why)) {
      return absl::DeadlineExceededError(absl::StrCat("pipeline: stage ", stage_, " waited ",
                                                      absl::FormatDuration(timeout_), " for ",
                                                      what(), ", which never came (", why, ")"));
    }
    return absl::UnavailableError(absl::StrCat("pipeline: receiving ", what(), " failed: ", why));
  }
  return absl::OkStatus();
}

}  // namespace yoke::pipeline
