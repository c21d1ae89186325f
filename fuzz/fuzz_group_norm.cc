// SPDX-License-Identifier: Apache-2.0
// Fuzzes group norm (and its instance / channel layer norm forms), layer norm and RMS
// norm: hostile descriptors, groups, eps, activations, statistics outputs, overlaps.
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
  normkit_tensor y = in.ConsumeBool() ? x
                                      : MakeTensor(in, arena, dtype, layout, rank, &skip,
                                                   in.ConsumeBool() ? &x : nullptr);
  if (in.ConsumeIntegralInRange<int>(0, 15) == 15 && x.data) {
    y.data = static_cast<uint8_t*>(x.data) + 4;
  }
  if (skip) return 0;
  const int64_t c = DimOr1(x, 1), n = DimOr1(x, 0);
  const int64_t groups =
      in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(-2, 16) : PickDim(in);
  const int64_t g = groups > 0 && groups < 4096 ? groups : 1;
  auto* gamma = in.ConsumeBool() ? static_cast<float*>(arena.Make(in, c * 4)) : nullptr;
  auto* beta = in.ConsumeBool() ? static_cast<float*>(arena.Make(in, c * 4)) : nullptr;
  if (arena.SizeOf(gamma) < static_cast<size_t>(c * 4)) gamma = nullptr;
  if (arena.SizeOf(beta) < static_cast<size_t>(c * 4)) beta = nullptr;
  // Statistics outputs sized for the largest count any op asks (N x C), or overlapping.
  const int64_t stats = n * c > n * g ? n * c : n * g;
  auto* mean = in.ConsumeBool() ? static_cast<float*>(arena.Make(in, stats * 4)) : nullptr;
  auto* rstd = in.ConsumeBool() ? static_cast<float*>(arena.Make(in, stats * 4)) : nullptr;
  if (arena.SizeOf(mean) < static_cast<size_t>(stats * 4)) mean = nullptr;
  if (arena.SizeOf(rstd) < static_cast<size_t>(stats * 4)) rstd = nullptr;
  if (in.ConsumeIntegralInRange<int>(0, 15) == 15) rstd = mean;
  const int32_t activation = PickEnum(in, 0, 2);
  const float eps = PickFloat(in);
  const std::vector<Snapshot> outs = {Take(y.data, arena.SizeOf(y.data)),
                                      Take(mean, arena.SizeOf(mean)),
                                      Take(rstd, arena.SizeOf(rstd))};
  normkit_status st;
  switch (in.ConsumeIntegralInRange<int>(0, 4)) {
    case 0:
      st = normkit_group_norm(nullptr, &x, groups, gamma, beta, eps, activation, &y, mean, rstd);
      break;
    case 1:
      st = normkit_instance_norm(nullptr, &x, gamma, beta, eps, activation, &y, mean, rstd);
      break;
    case 2:
      st = normkit_channel_layer_norm(nullptr, &x, gamma, beta, eps, activation, &y, mean, rstd);
      break;
    case 3: st = normkit_layer_norm(nullptr, &x, gamma, beta, eps, &y, mean, rstd); break;
    default: st = normkit_rms_norm(nullptr, &x, gamma, eps, &y, rstd); break;
  }
  CheckStatus(st);
  ExpectUntouched(st, outs);
  return 0;
}
