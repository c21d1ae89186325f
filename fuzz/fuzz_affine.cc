// SPDX-License-Identifier: Apache-2.0
// Fuzzes affine and batch-norm inference (and the BN folds): hostile descriptors,
// parameter kinds, eps, NULLs and in-place / overlapping outputs.
#include "fuzz_common.h"

using namespace normkit_fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  Arena arena;
  const int32_t dtype = PickEnum(in, 1, 4);
  const int32_t layout = PickEnum(in, 0, 1);
  const int32_t rank = PickEnum(in, 2, 5);
  bool skip = false;
  normkit_tensor x = MakeTensor(in, arena, dtype, layout, rank, &skip);
  normkit_tensor y = x;
  const int alias = in.ConsumeIntegralInRange<int>(0, 3);
  if (alias == 1 && x.data) {
    y.data = static_cast<uint8_t*>(x.data) + 4;  // partial overlap: must be rejected
  } else if (alias >= 2) {
    y = MakeTensor(in, arena, in.ConsumeBool() ? dtype : PickEnum(in, 1, 4), layout,
                   PickEnum(in, 2, 5), &skip, alias == 3 ? &x : nullptr);
  }
  if (skip) return 0;
  const int64_t c = DimOr1(x, 1), n = DimOr1(x, 0);
  const int32_t kind = PickEnum(in, 0, 1);
  const int64_t params = kind == NORMKIT_PARAMS_PER_SAMPLE_CHANNEL ? n * c : c;
  auto* scale = in.ConsumeBool() ? static_cast<float*>(arena.Make(in, params * 4)) : nullptr;
  auto* shift = in.ConsumeBool() ? static_cast<float*>(arena.Make(in, params * 4)) : nullptr;
  if (arena.SizeOf(scale) < static_cast<size_t>(params * 4)) scale = nullptr;
  if (arena.SizeOf(shift) < static_cast<size_t>(params * 4)) shift = nullptr;
  const size_t out_bytes = arena.SizeOf(y.data);
  const std::vector<Snapshot> outs = {Take(y.data, out_bytes)};
  normkit_status st;
  switch (in.ConsumeIntegralInRange<int>(0, 2)) {
    case 0: st = normkit_affine(nullptr, &x, scale, shift, kind, &y); break;
    case 1: {
      auto* mean = static_cast<float*>(arena.Make(in, c * 4));
      auto* var = static_cast<float*>(arena.Make(in, c * 4));
      if (arena.SizeOf(var) < static_cast<size_t>(c * 4)) {
        var = nullptr;
        mean = nullptr;
      }
      st = normkit_batch_norm_inference(nullptr, &x, scale, shift, mean, var, PickFloat(in), &y);
      break;
    }
    default: {
      // Arrays as long as the channel count claims (a valid claim too large to allocate
      // is skipped: the library would rightly read that much).
      const int64_t ch = in.ConsumeBool() ? c : PickDim(in);
      if (ch > 4096) return 0;
      const size_t len = ch > 0 ? static_cast<size_t>(ch) : 1;
      std::vector<float> gamma(len, 1.0f), mean(len, 0.0f), var(len, 1.0f), s(len, 7.0f),
          b(len, 7.0f);
      if (in.ConsumeBool()) var[len - 1] = PickFloat(in);
      const std::vector<float> s0 = s, b0 = b;
      st = normkit_batch_norm_fold(ch, gamma.data(), nullptr, mean.data(), var.data(),
                                   PickFloat(in), s.data(), b.data());
      CheckStatus(st);
      if (st != NORMKIT_SUCCESS && (s != s0 || b != b0)) std::abort();
      return 0;
    }
  }
  CheckStatus(st);
  ExpectUntouched(st, outs);
  return 0;
}
