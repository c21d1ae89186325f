// SPDX-License-Identifier: Apache-2.0
// The shift-sum family on bfloat16 / float16 tensors. The operators read and write x as
// stored (the row kernels widen half values as they load them and round them as they
// store them: ShiftSum*Stored, shift_sum.cc and shift_sum_gap.cc), except along H, where
// every operator but the forward runs the float32 driver on chunks of whole samples,
// each tensor of the chunk widened into a float scratch that stays in cache and its
// output rounded back to nearest even (a y row there reads C different x rows). Either
// way a half call gives bitwise the float32 call on its widened values, rounded (every
// y row is one task summing channels in a fixed order, whatever the rows around it).
#include <algorithm>
#include <vector>

#include "core/aligned_array.h"
#include "core/parallel.h"
#include "cpu/kernels/group_norm.h"
#include "cpu/memory_plan.h"
#include "cpu/shift_sum.h"
#include "cpu/shift_sum_rows.h"
#include "hwy/cache_control.h"

namespace normkit {
namespace cpu {
namespace {

using kernels::Storage;
using shift_sum_rows::kSharedNormalizerBytes;

// Float scratch per chunk: small enough to stay in the last-level cache between the
// widening, the operator and the rounding, large enough that a chunk's three parallel
// loops amortize their start (seed 003's samples are 7.3 MB in float: one per chunk).
constexpr int64_t kChunkBytes = int64_t{8} << 20;

// Elements per task of the conversion loops.
constexpr int64_t kConvertElems = int64_t{32} << 10;

// One tensor of the call: where sample b starts, and its float view for a chunk.
struct Operand {
  StoredTensor tensor;
  int64_t per_sample = 0;  // elements
  bool read = false, written = false;
  AlignedArray<float> scratch;  // half: a chunk of the tensor in float

  bool half() const { return tensor.storage != Storage::kFloat32; }
  char* Sample(int64_t b) const {
    return static_cast<char*>(tensor.data) + b * per_sample * kernels::StorageBytes(tensor.storage);
  }
};

void Widen(const normkit_context& ctx, const Operand& o, int64_t b0, int64_t samples) {
  const int64_t n = samples * o.per_sample;
  const char* src = o.Sample(b0);
  const int64_t bytes = kernels::StorageBytes(o.tensor.storage);
  ParallelFor(ContextForBytes(ctx, n * (bytes + 4)), (n + kConvertElems - 1) / kConvertElems,
              [&](int64_t t) {
                const int64_t i = t * kConvertElems;
                kernels::WidenToFloat(src + i * bytes, o.tensor.storage,
                                      std::min(kConvertElems, n - i), o.scratch.get() + i);
              });
}

void Narrow(const normkit_context& ctx, const Operand& o, int64_t b0, int64_t samples,
            bool stream) {
  const int64_t n = samples * o.per_sample;
  char* dst = o.Sample(b0);
  const int64_t bytes = kernels::StorageBytes(o.tensor.storage);
  ParallelFor(ContextForBytes(ctx, n * (bytes + 4)), (n + kConvertElems - 1) / kConvertElems,
              [&](int64_t t) {
                const int64_t i = t * kConvertElems;
                kernels::NarrowFromFloat(o.scratch.get() + i, std::min(kConvertElems, n - i),
                                         dst + i * bytes, o.tensor.storage, stream);
                if (stream) hwy::FlushStream();
              });
}

// The float32 operator of `call` on float tensors.
void RunFloat(const normkit_context& ctx, const ShiftSumStoredCall& call,
              const ShiftSumProblem<float>& p, const float* normalizer, const float* src,
              float* dst, ShiftSumScratch<float>* scratch) {
  switch (call.op) {
    case ShiftSumOp::kForward: return ShiftSumForward(ctx, p, src, dst, scratch);
    case ShiftSumOp::kAdjoint: return ShiftSumAdjoint(ctx, p, src, dst, scratch);
    case ShiftSumOp::kPinv: return ShiftSumPinv(ctx, p, call.mode, normalizer, src, dst, scratch);
    case ShiftSumOp::kGapStep:
      return ShiftSumGapStep(ctx, p, call.lambda, call.gamma, normalizer, src, dst, scratch);
    case ShiftSumOp::kShift: return Shift(ctx, p, src, dst, scratch);
    case ShiftSumOp::kUnshift: return Unshift(ctx, p, src, dst, scratch);
  }
}

void SampleChunks(const normkit_context& ctx, const ShiftSumProblem<float>& p,
                  const ShiftSumStoredCall& call) {
  const int64_t y_elems = p.H_out * p.W_out;
  int64_t in_elems = 0, out_elems = 0;
  SampleElems(p, call.op, &in_elems, &out_elems);
  Operand in, out;
  in.tensor = call.in;
  in.per_sample = in_elems;
  in.read = true;
  out.tensor = call.out;
  out.per_sample = out_elems;
  out.written = true;
  out.read = call.op == ShiftSumOp::kGapStep;  // x in place

  // Everything is allocated here, before any output is written: the chunk scratch, a
  // normalizer shared by the chunks, and (in the first chunk, the largest) the drivers'.
  const int64_t sample_bytes = 4 * ((in.half() ? in_elems : 0) + (out.half() ? out_elems : 0));
  const int64_t chunk =
      std::clamp<int64_t>(kChunkBytes / std::max<int64_t>(sample_bytes, 1), 1, p.B);
  for (Operand* o : {&in, &out}) {
    if (o->half()) o->scratch = AllocateAligned<float>(static_cast<size_t>(chunk * o->per_sample));
  }
  const float* normalizer = call.normalizer;
  std::vector<float> table;
  if (UsesNormalizer(call.op, call.mode) && !normalizer && !p.PerSampleMask() && chunk < p.B &&
      y_elems * int64_t{sizeof(float)} <= kSharedNormalizerBytes) {
    // The chunks share Phi_s: computed once rather than once per chunk.
    table.resize(static_cast<size_t>(y_elems));
    ShiftSumNormalizer(ctx, p, table.data());
    normalizer = table.data();
  }
  ShiftSumScratch<float> scratch;
  const bool stream = out.half() && p.B * out_elems * kernels::StorageBytes(out.tensor.storage) >=
                                        kStreamingStoreBytes;

  for (int64_t b0 = 0; b0 < p.B; b0 += chunk) {
    const int64_t samples = std::min(chunk, p.B - b0);
    const ShiftSumProblem<float> sub = SampleRange(p, b0, samples);
    for (const Operand* o : {&in, &out}) {
      if (o->half() && o->read) Widen(ctx, *o, b0, samples);
    }
    const auto view = [&](const Operand& o) {
      return o.half() ? o.scratch.get() : reinterpret_cast<float*>(o.Sample(b0));
    };
    const float* src = view(in);
    float* dst = view(out);
    const float* norm = normalizer && p.PerSampleMask() ? normalizer + b0 * y_elems : normalizer;
    RunFloat(ctx, call, sub, norm, src, dst, &scratch);
    if (out.half()) Narrow(ctx, out, b0, samples, stream);
  }
}

}  // namespace

void ShiftSumStored(const normkit_context& ctx, const ShiftSumProblem<float>& p,
                    const ShiftSumStoredCall& call) {
  // Along H the forward still reads its x rows in place (a y row sums C of them); the
  // operators that write x rows from y rows take sample chunks there, but for the
  // channels-first shift / unshift (whole rows copied in either direction).
  const bool stack = call.op == ShiftSumOp::kShift || call.op == ShiftSumOp::kUnshift;
  if (call.op != ShiftSumOp::kForward && p.along_h && !(stack && !p.channels_last)) {
    return SampleChunks(ctx, p, call);
  }
  switch (call.op) {
    case ShiftSumOp::kForward: return ShiftSumForwardStored(ctx, p, call.in, call.out);
    case ShiftSumOp::kAdjoint: return ShiftSumAdjointStored(ctx, p, call.in, call.out);
    case ShiftSumOp::kPinv:
      return ShiftSumPinvStored(ctx, p, call.mode, call.normalizer, call.in, call.out);
    case ShiftSumOp::kGapStep:
      return ShiftSumGapStepStored(ctx, p, call.lambda, call.gamma, call.normalizer, call.in,
                                   call.out);
    case ShiftSumOp::kShift: return ShiftStored(ctx, p, call.in, call.out);
    case ShiftSumOp::kUnshift: return UnshiftStored(ctx, p, call.in, call.out);
  }
}

}  // namespace cpu
}  // namespace normkit
