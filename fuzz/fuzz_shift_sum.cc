// SPDX-License-Identifier: Apache-2.0
// Fuzzes the shift-sum operators: hostile descriptors, steps (negative, huge), axes,
// mask kinds with masks sized to what the kind claims (or not), scales, modes, NULLs.
#include "fuzz_common.h"

using namespace normkit_fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  Arena arena;
  const int32_t dtype = in.ConsumeBool() ? PickEnum(in, 1, 4) : (in.ConsumeBool() ? 1 : 4);
  const int32_t layout = in.ConsumeIntegralInRange<int32_t>(0, 1);
  bool skip = false;
  normkit_tensor x =
      MakeTensor(in, arena, dtype, layout, !in.ConsumeBool() ? 4 : PickEnum(in, 2, 5), &skip);
  normkit_shift_sum_params params;
  normkit_shift_sum_params_init(
      &params, in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(-4, 4) : PickDim(in));
  params.axis = PickEnum(in, 0, 1);
  params.scale = in.ConsumeBool() ? 0.5 : static_cast<double>(PickFloat(in));
  params.mask_kind = PickEnum(in, 0, 5);
  if (in.ConsumeIntegralInRange<int>(0, 31) == 31)
    params.struct_size = in.ConsumeIntegral<uint32_t>();
  // y shaped as the geometry wants (most of the time), over its own buffer.
  const int64_t B = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  const int64_t S = params.step == INT64_MIN ? 0 : (params.step < 0 ? -params.step : params.step);
  int64_t spread = 0, Hp = H, Wp = W;
  // The geometry the library will compute whenever it accepts x and the step (the same
  // overflow rules as shift_sum_api.cc); every buffer below is sized exactly from it,
  // and one too large to allocate skips the input. Otherwise the call must be rejected
  // and the buffers stay small.
  int64_t along = params.axis == NORMKIT_SHIFT_ALONG_H ? H : W, out = 0, total = 0;
  const bool sane =
      x.rank == 4 && B >= 1 && C >= 1 && H >= 1 && W >= 1 && params.step != INT64_MIN &&
      !__builtin_mul_overflow(C - 1, S, &spread) && !__builtin_add_overflow(along, spread, &out) &&
      !__builtin_mul_overflow(out, params.axis == NORMKIT_SHIFT_ALONG_H ? W : H, &total) &&
      !__builtin_mul_overflow(total, B, &total) && !__builtin_mul_overflow(total, C, &total) &&
      !__builtin_mul_overflow(total, ElementBytes(dtype), &total);
  if (sane) (params.axis == NORMKIT_SHIFT_ALONG_H ? Hp : Wp) += spread;
  normkit_tensor y = MakeTensor(in, arena, dtype, 0, 4, &skip);
  if (sane && in.ConsumeIntegralInRange<int>(0, 7) != 7) {
    const int64_t ys[4] = {B, 1, Hp, Wp};
    normkit_tensor_init(&y, arena.MakeExact(in, B * Hp * Wp * ElementBytes(dtype), &skip),
                        NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_FIRST, 4, ys);
    y.dtype = dtype;
  }
  // The mask as large as its kind claims, or a small one; masks, normalizers and Phi_s
  // are float64 beside float64 tensors, else float32 (half tensors too).
  const int64_t param_bytes = dtype == NORMKIT_DTYPE_FLOAT64 ? 8 : 4;
  int64_t mask_elems = 4;
  if (sane) {
    switch (params.mask_kind) {
      case NORMKIT_MASK_HW: mask_elems = H * W; break;
      case NORMKIT_MASK_CHW: mask_elems = C * H * W; break;
      case NORMKIT_MASK_BCHW: mask_elems = B * C * H * W; break;
      case NORMKIT_MASK_PHI_CHW: mask_elems = C * Hp * Wp; break;
      case NORMKIT_MASK_PHI_BCHW: mask_elems = B * C * Hp * Wp; break;
    }
  }
  // Bytes of `elems` parameters, saturated: a float32 mask beside half tensors can be
  // twice the bytes the geometry check above allowed for, and one too large skips the input.
  const auto param_array_bytes = [&](int64_t elems) {
    int64_t bytes = 0;
    return __builtin_mul_overflow(elems, param_bytes, &bytes) ? INT64_MAX : bytes;
  };
  params.mask = in.ConsumeIntegralInRange<int>(0, 7) == 7
                    ? nullptr
                    : arena.MakeExact(in, param_array_bytes(mask_elems), &skip);
  if (params.mask_kind == NORMKIT_MASK_NONE && !in.ConsumeBool()) params.mask = nullptr;
  const void* normalizer =
      in.ConsumeBool() ? arena.MakeExact(in, param_array_bytes(sane ? B * Hp * Wp : 4), &skip)
                       : nullptr;
  normkit_shift_sum_params* pp = in.ConsumeIntegralInRange<int>(0, 31) == 31 ? nullptr : &params;
  if (skip) return 0;
  normkit_status st;
  switch (PickEnum(in, 1, 4)) {
    case 0: {
      const auto outs = std::vector<Snapshot>{Take(y.data, arena.SizeOf(y.data))};
      st = normkit_shift_sum(nullptr, &x, pp, &y);
      CheckStatus(st);
      ExpectUntouched(st, outs);
      return 0;
    }
    case 1: {
      const auto outs = std::vector<Snapshot>{Take(x.data, arena.SizeOf(x.data))};
      st = normkit_shift_sum_adjoint(nullptr, &y, pp, &x);
      CheckStatus(st);
      ExpectUntouched(st, outs);
      return 0;
    }
    case 2: {
      const auto outs = std::vector<Snapshot>{Take(x.data, arena.SizeOf(x.data))};
      st = normkit_shift_sum_pinv(nullptr, &y, pp, PickEnum(in, 0, 1), normalizer, &x);
      CheckStatus(st);
      ExpectUntouched(st, outs);
      return 0;
    }
    case 3: {
      const auto outs = std::vector<Snapshot>{Take(x.data, arena.SizeOf(x.data))};
      st =
          normkit_shift_sum_gap_step(nullptr, &x, &y, pp, PickFloat(in), PickFloat(in), normalizer);
      CheckStatus(st);
      ExpectUntouched(st, outs);
      return 0;
    }
    case 4: {
      void* phi_s = arena.MakeExact(in, param_array_bytes(sane ? B * Hp * Wp : 4), &skip);
      if (skip) return 0;
      const auto outs = std::vector<Snapshot>{Take(phi_s, arena.SizeOf(phi_s))};
      st = normkit_shift_sum_normalizer(nullptr, &x, pp, phi_s);
      CheckStatus(st);
      ExpectUntouched(st, outs);
      return 0;
    }
    default: {
      normkit_tensor xs = MakeTensor(in, arena, dtype, layout, 4, &skip);
      if (skip) return 0;
      if (sane && in.ConsumeBool()) {
        const int64_t ss[4] = {B, C, Hp, Wp};
        normkit_tensor_init(&xs, arena.MakeExact(in, B * C * Hp * Wp * ElementBytes(dtype), &skip),
                            NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_FIRST, 4, ss);
        xs.dtype = dtype;
        xs.layout = layout;
      }
      if (skip) return 0;
      const auto outs = std::vector<Snapshot>{Take(xs.data, arena.SizeOf(xs.data))};
      st = normkit_shift(nullptr, &x, pp, &xs);
      CheckStatus(st);
      ExpectUntouched(st, outs);
      return 0;
    }
  }
}
