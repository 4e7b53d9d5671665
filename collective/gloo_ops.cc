#include "collective/gloo_ops.h"

#include <cstring>
#include <vector>

#include "collective/half.h"
#include "gloo/allreduce.h"
#include "gloo/allreduce_halving_doubling.h"
#include "gloo/allreduce_ring.h"

namespace yoke::collective {
namespace {

template <typename T>
void SumInto(void* out, const void* a, const void* b, size_t n) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

void SumF16Fn(void* out, const void* a, const void* b, size_t n) {
  SumF16(static_cast<uint16_t*>(out), static_cast<const uint16_t*>(a),
         static_cast<const uint16_t*>(b), n);
}

void SumBF16Fn(void* out, const void* a, const void* b, size_t n) {
  SumBF16(static_cast<uint16_t*>(out), static_cast<const uint16_t*>(a),
          static_cast<const uint16_t*>(b), n);
}

// out = out + in, for the unbound and the ring path alike.
using SumFn = void (*)(void*, const void*, const void*, size_t);

SumFn SumFunction(DataType t) {
  switch (t) {
    case DataType::kF32:
      return &SumInto<float>;
    case DataType::kF16:
      return &SumF16Fn;
    case DataType::kBF16:
      return &SumBF16Fn;
    case DataType::kI32:
      return &SumInto<int32_t>;
    case DataType::kI64:
      return &SumInto<int64_t>;
    case DataType::kU8:
      return &SumInto<uint8_t>;
  }
  return nullptr;
}

template <typename T>
void SetOutput(gloo::AllreduceOptions& g, const Buffer& b) {
  g.setOutput(static_cast<T*>(b.data), b.count);
}

// A ReductionFunction for the ring from a SumFn, per storage type.
template <typename T, SumFn kFn>
void RingSum(T* x, const T* y, size_t n) {
  kFn(x, x, y, n);
}

}  // namespace

// Type-erased cached AllreduceRing.
class AllreduceCache::Ring {
 public:
  virtual ~Ring() noexcept(false) = default;  // gloo::Algorithm's destructor may throw
  virtual void RunOn(void* ptr) = 0;
};

namespace {

// gloo's AllreduceRing keeps the caller's pointer only to copy from and
// reduce into (its registered buffers are its own inbox and outbox), so one
// instance serves any buffer of its count: point ptrs_[0] at it and run.
template <typename T>
class RingOf : public AllreduceCache::Ring, public gloo::AllreduceRing<T> {
 public:
  RingOf(const std::shared_ptr<gloo::Context>& context, T* first, int count,
         const gloo::ReductionFunction<T>* fn)
      : gloo::AllreduceRing<T>(context, {first}, count, fn), fn_holder_(fn) {}
  void RunOn(void* ptr) override {
    this->ptrs_[0] = static_cast<T*>(ptr);
    this->run();
  }

 private:
  std::unique_ptr<const gloo::ReductionFunction<T>> fn_holder_;
};

// gloo's AllreduceHalvingDoubling (recursive-halving reduce-scatter, then
// recursive-doubling allgather: each element is reduced on one rank and
// copied to the others, so every rank gets the same bits) registers the
// caller's pointer as its send buffer. It therefore runs on a staging buffer
// of its own, which the op copies the caller's buffer into and back out of.
template <typename T>
class HalvingDoublingOf : public AllreduceCache::Ring {
 public:
  HalvingDoublingOf(const std::shared_ptr<gloo::Context>& context, int count,
                    const gloo::ReductionFunction<T>* fn)
      : staging_(count),
        fn_holder_(fn),
        algo_(context, std::vector<T*>{staging_.data()}, count, fn) {}
  void RunOn(void* ptr) override {
    const size_t bytes = staging_.size() * sizeof(T);
    std::memcpy(staging_.data(), ptr, bytes);
    algo_.run();
    std::memcpy(ptr, staging_.data(), bytes);
  }

 private:
  std::vector<T> staging_;
  std::unique_ptr<const gloo::ReductionFunction<T>> fn_holder_;
  gloo::AllreduceHalvingDoubling<T> algo_;
};

// Two ranks: AllreduceRing (each rank adds the other's buffer to its own,
// and a + b == b + a bit for bit). Three or more: AllreduceRing would add
// the ranks' buffers in a different order on every rank, and float addition
// is not associative, so the replicas of a data-parallel job would drift
// apart; halving-doubling gives every rank the same bits.
template <typename T, SumFn kFn>
std::unique_ptr<AllreduceCache::Ring> MakeRing(const std::shared_ptr<gloo::Context>& context,
                                               const Buffer& b) {
  auto* fn = new gloo::ReductionFunction<T>(gloo::SUM, &RingSum<T, kFn>);
  if (context->size > 2) {
    return std::make_unique<HalvingDoublingOf<T>>(context, static_cast<int>(b.count), fn);
  }
  return std::make_unique<RingOf<T>>(context, static_cast<T*>(b.data), static_cast<int>(b.count),
                                     fn);
}

std::unique_ptr<AllreduceCache::Ring> MakeRing(const std::shared_ptr<gloo::Context>& context,
                                               const Buffer& b) {
  switch (b.dtype) {
    case DataType::kF32:
      return MakeRing<float, &SumInto<float>>(context, b);
    case DataType::kF16:
      return MakeRing<uint16_t, &SumF16Fn>(context, b);
    case DataType::kBF16:
      return MakeRing<uint16_t, &SumBF16Fn>(context, b);
    case DataType::kI32:
      return MakeRing<int32_t, &SumInto<int32_t>>(context, b);
    case DataType::kI64:
      return MakeRing<int64_t, &SumInto<int64_t>>(context, b);
    case DataType::kU8:
      return MakeRing<uint8_t, &SumInto<uint8_t>>(context, b);
  }
  return nullptr;
}

}  // namespace

AllreduceCache::AllreduceCache(size_t ring_max_bytes) : ring_max_bytes_(ring_max_bytes) {}
AllreduceCache::~AllreduceCache() = default;

void AllreduceCache::Sum(const std::shared_ptr<gloo::Context>& context, const Buffer& buf,
                         uint32_t tag, std::chrono::milliseconds timeout) {
  const size_t bytes = buf.bytes();
  const auto key = std::make_pair(buf.count, buf.dtype);
  auto it = rings_.find(key);
  if (it == rings_.end() && bytes * (context->size - 1) <= ring_max_bytes_ &&
      bytes_ + 3 * bytes <= kMaxBytes) {
    // Every rank must build its ring at the same point, or their slots
    // differ. A one-element allreduce under the op's tag (which folds in the
    // op's signature) proves that all ranks are building the same op: with
    // mismatched ops the tags differ and it times out instead of letting a
    // peer's data overflow this ring's registered buffers.
    int64_t probe = 0;
    gloo::AllreduceOptions g(context);
    g.setOutput(&probe, 1);
    g.setReduceFunction(&SumInto<int64_t>);
    g.setTag(tag);
    g.setTimeout(timeout);
    gloo::allreduce(g);
    it = rings_.emplace(key, MakeRing(context, buf)).first;
    bytes_ += 3 * bytes;  // inbox + outbox, or staging + receive buffers
  }
  if (it != rings_.end()) {
    it->second->RunOn(buf.data);
    return;
  }
  gloo::AllreduceOptions g(context);
  switch (DataTypeSize(buf.dtype)) {
    case 1:
      SetOutput<uint8_t>(g, buf);
      break;
    case 2:
      SetOutput<uint16_t>(g, buf);
      break;
    case 4:
      SetOutput<uint32_t>(g, buf);
      break;
    default:
      SetOutput<uint64_t>(g, buf);
  }
  g.setReduceFunction(SumFunction(buf.dtype));
  g.setTag(tag);
  g.setTimeout(timeout);
  gloo::allreduce(g);
}

void DivideBy(const Buffer& b, int n) {
  const int64_t c = b.count;
  switch (b.dtype) {
    case DataType::kF32:
      for (float *p = static_cast<float*>(b.data), *e = p + c; p != e; ++p) *p /= n;
      return;
    case DataType::kI32:
      for (int32_t *p = static_cast<int32_t*>(b.data), *e = p + c; p != e; ++p) *p /= n;
      return;
    case DataType::kI64:
      for (int64_t *p = static_cast<int64_t*>(b.data), *e = p + c; p != e; ++p) *p /= n;
      return;
    case DataType::kU8:
      for (uint8_t *p = static_cast<uint8_t*>(b.data), *e = p + c; p != e; ++p) *p /= n;
      return;
    case DataType::kF16:
    case DataType::kBF16: {
      uint16_t* h = static_cast<uint16_t*>(b.data);
      const bool f16 = b.dtype == DataType::kF16;
      for (int64_t i = 0; i < c; ++i) {
        const float v = (f16 ? F16ToF32Scalar(h[i]) : BF16ToF32Scalar(h[i])) / n;
        h[i] = f16 ? F32ToF16Scalar(v) : F32ToBF16Scalar(v);
      }
      return;
    }
  }
}

}  // namespace yoke::collective
