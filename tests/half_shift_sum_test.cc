// SPDX-License-Identifier: Apache-2.0
// The shift-sum family on bfloat16 / float16 tensors, in every dtype pair: bitwise the
// float32 call on the widened values, rounded to the output's format, and (forward,
// adjoint, shift, unshift) against the double references of shift_sum_reference.h on
// the paths each geometry takes, including large calls over many tasks and chunks of
// samples (along H).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "half_reference.h"
#include "half_targets.h"
#include "hwy/targets.h"
#include "shift_sum_reference.h"
#include "test_util.h"

namespace normkit_test {
namespace {

// Elements of `dtype` (float32, bfloat16 or float16) in plain bytes, the tensor's first
// `lead` elements past the allocation's start (1: a half tensor off every vector
// boundary), the lead and one element past the end kept as guards.
struct Buffer {
  Buffer(int32_t dtype, int64_t n, int64_t lead = 0)
      : dtype(dtype), lead(lead), raw(static_cast<size_t>((n + lead + 1) * Size()), 0xA5) {}
  int64_t Size() const { return dtype == kF32 ? 4 : 2; }
  int64_t n() const { return static_cast<int64_t>(raw.size()) / Size() - lead - 1; }
  void* data() { return raw.data() + lead * Size(); }
  uint32_t Bits(int64_t i) const {
    uint32_t u = 0;
    std::memcpy(&u, raw.data() + (i + lead) * Size(), static_cast<size_t>(Size()));
    return u;
  }
  // Whether the guard bytes around the tensor are as made.
  bool GuardsKept() const {
    const size_t tail = static_cast<size_t>((n() + lead) * Size());
    for (size_t i = 0; i < static_cast<size_t>(lead * Size()); ++i) {
      if (raw[i] != 0xA5) return false;
    }
    for (size_t i = tail; i < raw.size(); ++i) {
      if (raw[i] != 0xA5) return false;
    }
    return true;
  }
  double Get(int64_t i) const {
    if (dtype == kF32) return FloatOfBits(Bits(i));
    return Decode(static_cast<uint16_t>(Bits(i)), FormatOf(dtype));
  }
  // Stores v rounded plainly to the format.
  void Set(int64_t i, float v) {
    const uint32_t u = dtype == kF32 ? BitsOf(v) : Narrow(v, FormatOf(dtype));
    std::memcpy(raw.data() + (i + lead) * Size(), &u, static_cast<size_t>(Size()));
  }
  // The float32 value `f` stored in this buffer's format (what a half output must hold).
  uint32_t BitsOfResult(float f) const {
    return dtype == kF32 ? BitsOf(f) : Narrow(f, FormatOf(dtype));
  }

  int32_t dtype;
  int64_t lead;
  std::vector<unsigned char> raw;
};

normkit_tensor TensorOf(Buffer* b, normkit_layout layout, const std::vector<int64_t>& shape) {
  normkit_tensor t = Desc(b->data(), layout, shape);
  t.dtype = b->dtype;
  return t;
}

enum class Op { kForward, kAdjoint, kPinvMP, kPinvDBM, kGap, kShift, kUnshift };
const Op kOps[] = {Op::kForward, Op::kAdjoint, Op::kPinvMP, Op::kPinvDBM,
                   Op::kGap,     Op::kShift,   Op::kUnshift};

const char* OpName(Op op) {
  switch (op) {
    case Op::kForward: return "forward";
    case Op::kAdjoint: return "adjoint";
    case Op::kPinvMP: return "pinv MP";
    case Op::kPinvDBM: return "pinv divide-by-mask";
    case Op::kGap: return "GAP step";
    case Op::kShift: return "shift";
    case Op::kUnshift: return "unshift";
  }
  return "";
}

// The dtypes of the tensor an op reads (`in`) and the one it writes (`out`).
struct Pair {
  int32_t in, out;
};
const Pair kPairs[] = {{kBF16, kBF16}, {kF16, kF16},  {kBF16, kF32},
                       {kF16, kF32},   {kF32, kBF16}, {kF32, kF16}};

struct Case {
  Geometry g;
  bool channels_last;
  Pair pair;
  bool given_normalizer = false;  // pinv MP and GAP: Phi_s from normkit_shift_sum_normalizer
  float magnitude = 2.0f;         // inputs in [-magnitude, magnitude]
  int64_t lead = 0;               // elements before each stored tensor (Buffer)
};

// Calls op with the tensors `in` (read) and `out` (written; the GAP step's x, also read).
normkit_status Call(Op op, normkit_context* ctx, const Case& c, const normkit_shift_sum_params& p,
                    Buffer* in, Buffer* out, const float* normalizer) {
  const Geometry& g = c.g;
  const auto layout =
      c.channels_last ? NORMKIT_LAYOUT_CHANNELS_LAST : NORMKIT_LAYOUT_CHANNELS_FIRST;
  const std::vector<int64_t> xshape = {g.B, g.C, g.H, g.W};
  const std::vector<int64_t> yshape = {g.B, 1, g.Hout(), g.Wout()};
  const std::vector<int64_t> sshape = {g.B, g.C, g.Hout(), g.Wout()};
  const auto y_of = [&](Buffer* b) { return TensorOf(b, NORMKIT_LAYOUT_CHANNELS_FIRST, yshape); };
  const auto x_of = [&](Buffer* b) { return TensorOf(b, layout, xshape); };
  const auto s_of = [&](Buffer* b) { return TensorOf(b, layout, sshape); };
  switch (op) {
    case Op::kForward: {
      const normkit_tensor x = x_of(in), y = y_of(out);
      return normkit_shift_sum(ctx, &x, &p, &y);
    }
    case Op::kAdjoint: {
      const normkit_tensor y = y_of(in), x = x_of(out);
      return normkit_shift_sum_adjoint(ctx, &y, &p, &x);
    }
    case Op::kPinvMP:
    case Op::kPinvDBM: {
      const normkit_tensor y = y_of(in), x = x_of(out);
      const bool mp = op == Op::kPinvMP;
      return normkit_shift_sum_pinv(ctx, &y, &p,
                                    mp ? NORMKIT_PINV_MOORE_PENROSE : NORMKIT_PINV_DIVIDE_BY_MASK,
                                    mp ? normalizer : nullptr, &x);
    }
    case Op::kGap: {
      const normkit_tensor y = y_of(in), x = x_of(out);
      return normkit_shift_sum_gap_step(ctx, &x, &y, &p, 0.75, 0.125, normalizer);
    }
    case Op::kShift: {
      const normkit_tensor x = x_of(in), xs = s_of(out);
      return normkit_shift(ctx, &x, &p, &xs);
    }
    case Op::kUnshift: {
      const normkit_tensor xs = s_of(in), x = x_of(out);
      return normkit_unshift(ctx, &xs, &p, &x);
    }
  }
  return NORMKIT_ERROR_INVALID_ARGUMENT;
}

// One unit in the last place of `dtype` at |v| (float32: float's), for the tolerance of
// a rounded output.
double UnitAt(double v, int32_t dtype) {
  if (dtype == kF32) return std::ldexp(std::fabs(v), -23) + 1e-45;
  const HalfFormat f = FormatOf(dtype);
  const uint16_t h = Encode(std::fabs(v), f);
  return Decode(static_cast<uint16_t>(h + 1), f) - Decode(h, f);
}

void RunCase(Op op, const Case& c, int threads) {
  const Geometry& g = c.g;
  const int64_t nx = g.B * g.C * g.H * g.W, ny = g.B * g.Hout() * g.Wout();
  const int64_t ns = g.B * g.C * g.Hout() * g.Wout();
  int64_t n_in = nx, n_out = nx;
  switch (op) {
    case Op::kForward: n_out = ny; break;
    case Op::kShift: n_out = ns; break;
    case Op::kUnshift: n_in = ns; break;
    default: n_in = ny; break;
  }
  std::vector<float> mask = RandomVector(std::max<int64_t>(g.MaskElems(), 1), 21, 0.0f, 1.0f);
  for (size_t i = 0; i < mask.size(); i += 7) mask[i] = 0.0f;
  const normkit_shift_sum_params p = ParamsFor(g, mask.data());

  // The stored call's tensors, and float32 tensors holding their widened values.
  Buffer in(c.pair.in, n_in, c.lead), out(c.pair.out, n_out, c.lead), in_wide(kF32, n_in),
      out_wide(kF32, n_out);
  // Drawn in [-1, 1] and scaled: a range of 2 * magnitude may pass FLT_MAX.
  std::vector<float> in_values = RandomVector(n_in, 22, -1.0f, 1.0f);
  std::vector<float> x_values = RandomVector(n_out, 23, -1.0f, 1.0f);
  for (float& v : in_values) v *= c.magnitude;
  for (float& v : x_values) v *= c.magnitude;
  for (int64_t i = 0; i < n_in; ++i) {
    in.Set(i, in_values[static_cast<size_t>(i)]);
    in_wide.Set(i, static_cast<float>(in.Get(i)));
  }
  for (int64_t i = 0; i < n_out; ++i) {
    out.Set(i, op == Op::kGap ? x_values[static_cast<size_t>(i)] : -7.0f);
    out_wide.Set(i, static_cast<float>(out.Get(i)));
  }
  Context ctx(threads);
  std::vector<float> phi(static_cast<size_t>((g.PerSample() ? g.B : 1) * g.Hout() * g.Wout()));
  if (c.given_normalizer) {
    const std::vector<int64_t> xshape = {g.B, g.C, g.H, g.W};
    normkit_tensor shape_only = Desc(
        nullptr, c.channels_last ? NORMKIT_LAYOUT_CHANNELS_LAST : NORMKIT_LAYOUT_CHANNELS_FIRST,
        xshape);
    shape_only.dtype = c.pair.in;  // a half x gives float32 Phi_s
    ASSERT_EQ(normkit_shift_sum_normalizer(ctx.ctx, &shape_only, &p, phi.data()), NORMKIT_SUCCESS)
        << normkit_last_error();
  }
  const float* normalizer = c.given_normalizer ? phi.data() : nullptr;
  ASSERT_EQ(Call(op, ctx.ctx, c, p, &in, &out, normalizer), NORMKIT_SUCCESS)
      << normkit_last_error();
  ASSERT_EQ(Call(op, ctx.ctx, c, p, &in_wide, &out_wide, normalizer), NORMKIT_SUCCESS)
      << normkit_last_error();

  int64_t not_same = 0;
  for (int64_t i = 0; i < n_out; ++i) {
    const float f = FloatOfBits(out_wide.Bits(i));
    if (out.Bits(i) != out.BitsOfResult(f) && not_same++ < 5) {
      ADD_FAILURE() << "element " << i << ": " << out.Get(i) << " is not the float32 call's " << f
                    << " rounded";
    }
  }
  EXPECT_EQ(not_same, 0);
  EXPECT_TRUE(in.GuardsKept() && out.GuardsKept()) << "written outside the tensors";

  // The operators with a plain reference, on the widened values.
  if (op != Op::kForward && op != Op::kAdjoint && op != Op::kShift && op != Op::kUnshift) return;
  const bool cl = c.channels_last;
  std::vector<double> in_d(static_cast<size_t>(n_in)), abs_d(in_d.size());
  for (int64_t i = 0; i < n_in; ++i) {
    in_d[static_cast<size_t>(i)] = in_wide.Get(i);
    abs_d[static_cast<size_t>(i)] = std::fabs(in_wide.Get(i));
  }
  std::vector<double> m_d(mask.begin(), mask.end()), want(static_cast<size_t>(n_out)), mag;
  if (op == Op::kForward || op == Op::kAdjoint) {
    const auto ref = op == Op::kForward ? RefForward : RefAdjoint;
    want = ref(g, in_d, m_d, cl);
    mag = ref(g, abs_d, m_d, cl);  // the masks are >= 0
  } else {
    // shift / unshift: copies, so exact (the scale and the mask are not used).
    Geometry plain = g;
    plain.scale = 1.0;
    plain.mask_kind = NORMKIT_MASK_NONE;
    std::vector<double> as_y(static_cast<size_t>(ns), 0.0);
    for (int64_t b = 0; b < g.B; ++b)
      for (int64_t ch = 0; ch < g.C; ++ch)
        for (int64_t h = 0; h < g.H; ++h)
          for (int64_t w = 0; w < g.W; ++w) {
            const int64_t r = g.R(ch, h), v = g.V(ch, w);
            const int64_t si = cl ? ((b * g.Hout() + r) * g.Wout() + v) * g.C + ch
                                  : ((b * g.C + ch) * g.Hout() + r) * g.Wout() + v;
            const int64_t xi = g.XIndex(b, ch, h, w, cl);
            if (op == Op::kShift) {
              want[static_cast<size_t>(si)] = in_d[static_cast<size_t>(xi)];
            } else {
              want[static_cast<size_t>(xi)] = in_d[static_cast<size_t>(si)];
            }
          }
    mag.assign(want.size(), 0.0);
  }
  // Past the output format's largest value a result is Inf; where the magnitudes summed
  // reach float's, a partial sum may overflow (Inf, or NaN from opposite Infs); the sums
  // are scaled after they are made.
  const double unscaled = 1.0 / std::min(g.scale, 1.0);
  const double largest = out.dtype == kF16 ? 65504.0 : 3.4028234663852886e38;
  const double sum_error = 4.0 * static_cast<double>(g.C + 2) * 1.2e-7;
  int64_t wrong = 0;
  for (int64_t i = 0; i < n_out; ++i) {
    const double w = want[static_cast<size_t>(i)], got = out.Get(i);
    const double m = mag[static_cast<size_t>(i)];
    const double tol = UnitAt(w, out.dtype) + sum_error * m;
    const bool overflows =
        (std::isinf(got) && std::fabs(w) > largest) ||
        (!std::isfinite(got) && m * unscaled * (1.0 + sum_error) >= 3.4028234663852886e38);
    if (!(std::fabs(got - w) <= tol) && !overflows && wrong++ < 5) {
      ADD_FAILURE() << "element " << i << ": got " << got << ", want " << w;
    }
  }
  EXPECT_EQ(wrong, 0);
}

std::string Describe(Op op, const Case& c) {
  const Geometry& g = c.g;
  return std::string(OpName(op)) + " " + DtypeLabel(c.pair.in) + " -> " + DtypeLabel(c.pair.out) +
         " B=" + std::to_string(g.B) + " C=" + std::to_string(g.C) + " H=" + std::to_string(g.H) +
         " W=" + std::to_string(g.W) + " S=" + std::to_string(g.S) + (g.along_h ? " along H" : "") +
         " mask " + std::to_string(g.mask_kind) + (c.channels_last ? " NHWC" : " NCHW") +
         (c.given_normalizer ? " given Phi_s" : "");
}

// Every op in every dtype pair on geometries that take each path of the float drivers
// (channels-first tiles, along H, channels-last skewed rows, phases, plane slices),
// with each mask form, both layouts and both step signs.
TEST(HalfShiftSum, EveryOpPairAndPath) {
  const std::vector<Geometry> shapes = {
      {2, 5, 6, 33, 2, false, NORMKIT_MASK_CHW, 0.5},       // channels-first tiles
      {2, 4, 7, 9, -1, true, NORMKIT_MASK_HW, 1.0},         // along H
      {2, 8, 5, 40, 2, false, NORMKIT_MASK_HW, 1.0},        // skewed rows (NHWC)
      {1, 40, 3, 48, -2, false, NORMKIT_MASK_NONE, 1.0},    // phases (NHWC)
      {2, 80, 2, 64, 3, false, NORMKIT_MASK_BCHW, 0.25},    // plane slices (NHWC)
      {2, 6, 4, 20, 1, false, NORMKIT_MASK_PHI_BCHW, 1.0},  // a per-sample Phi mask
  };
  int k = 0;
  for (const Geometry& g : shapes) {
    for (bool cl : {false, true}) {
      for (const Pair& pair : kPairs) {
        for (Op op : kOps) {
          Case c{g, cl, pair};
          c.given_normalizer = (op == Op::kPinvMP || op == Op::kGap) && k++ % 2 == 0;
          SCOPED_TRACE(Describe(op, c));
          RunCase(op, c, 2);
        }
      }
    }
  }
}

// Large calls (these 3x28x96x256 x and their y: 8.6 MB of float) over several tasks and
// threads with every mask kind, given and shared Phi_s: along W read and written as
// stored (channels-last in-register planes at C = 28, phases at 72, past the skewed rows'
// four vectors, plane slices at 80); along H in chunks of whole samples (8 MB of float:
// 2.8 MB samples run as chunks of two and one). Three threads. Then float16 sums past its
// largest value.
TEST(HalfShiftSum, LargeCallsAndOverflow) {
  const Geometry big_hw{3, 28, 96, 256, 2, false, NORMKIT_MASK_HW, 1.0};
  const Geometry big_chw{3, 28, 96, 256, 2, false, NORMKIT_MASK_CHW, 1.0};
  const Geometry big_bchw{3, 28, 96, 256, -1, false, NORMKIT_MASK_BCHW, 1.0};
  const Geometry big_phi{3, 28, 96, 256, -2, false, NORMKIT_MASK_PHI_CHW, 1.0};
  const Geometry big_phi_b{3, 28, 96, 256, 1, false, NORMKIT_MASK_PHI_BCHW, 1.0};
  const Geometry big_along_h{3, 28, 96, 256, 2, true, NORMKIT_MASK_CHW, 1.0};
  const Geometry big_phases{3, 72, 40, 256, -2, false, NORMKIT_MASK_NONE, 1.0};
  const Geometry big_plane_slices{3, 80, 40, 256, 3, false, NORMKIT_MASK_BCHW, 0.25};
  // Every op on one call; on the others the ops their mask kind, normalizer and path
  // reach (a third of the work: this test is the longest under the sanitizers).
  const Op F = Op::kForward, A = Op::kAdjoint, MP = Op::kPinvMP, DBM = Op::kPinvDBM, G = Op::kGap;
  const std::vector<Op> all(std::begin(kOps), std::end(kOps));
  const struct {
    Case c;
    std::vector<Op> ops;
  } runs[] = {{{big_hw, false, {kBF16, kBF16}}, all},
              {{big_chw, true, {kBF16, kF32}}, {F, G}},
              {{big_chw, false, {kF16, kF16}}, {A, DBM}},
              {{big_bchw, true, {kF16, kF32}}, {F, A, DBM}},
              {{big_bchw, false, {kF32, kBF16}, true}, {MP, G}},
              {{big_phi, true, {kBF16, kBF16}}, {F, G}},
              {{big_phi, false, {kF32, kF16}, true}, {A, MP}},
              {{big_phi_b, false, {kBF16, kBF16}, true}, {F, G}},
              {{big_along_h, false, {kBF16, kBF16}, true}, {F, MP, G}},
              {{big_along_h, true, {kF16, kF32}}, {A, Op::kUnshift}},
              {{big_phases, true, {kBF16, kBF16}}, {F, G}},
              {{big_plane_slices, true, {kF32, kF16}}, {F, A, Op::kShift}}};
  for (const auto& run : runs) {
    for (Op op : run.ops) {
      SCOPED_TRACE(Describe(op, run.c));
      RunCase(op, run.c, 3);
    }
  }
  const Geometry overflow{2, 28, 4, 64, 2, false, NORMKIT_MASK_NONE, 1.0};
  for (bool cl : {false, true}) {
    Case c{overflow, cl, {kF16, kF16}};
    c.magnitude = 30000.0f;  // sums of 28 of these pass 65504: Inf, as the float result rounds
    SCOPED_TRACE(Describe(Op::kForward, c));
    RunCase(Op::kForward, c, 2);
  }
}

// Small geometries that take every path of the stored-x kernels.
std::vector<Geometry> StoredXPathShapes() {
  return {
      {2, 9, 5, 37, 2, false, NORMKIT_MASK_HW, 0.5},       // NCHW tiles; NHWC skewed rows
      {2, 4, 7, 9, -1, true, NORMKIT_MASK_CHW, 1.0},       // along H, both layouts
      {1, 72, 3, 29, -2, false, NORMKIT_MASK_NONE, 1.0},   // NHWC phases
      {2, 5, 4, 67, 1, false, NORMKIT_MASK_PHI_CHW, 1.0},  // NHWC planes in registers
      {1, 96, 3, 45, 3, false, NORMKIT_MASK_BCHW, 0.25},   // NHWC plane slices
      {2, 20, 3, 41, -1, false, NORMKIT_MASK_HW, 1.0},     // NHWC skewed GAP rows
      // NHWC pixels from windows (|S| <= 2) of both signs, a channel count past a
      // vector of every target, no mask; and under one vector of the widest
      {1, 17, 2, 23, 1, false, NORMKIT_MASK_HW, 0.5},
      {2, 28, 2, 19, -2, false, NORMKIT_MASK_NONE, 2.0 / 28},
      {1, 3, 2, 11, 2, false, NORMKIT_MASK_HW, 1.0},
  };
}

// The forward reads a half x in its own bytes through kernels compiled per SIMD target
// (tiles, skewed rows, phases, transpositions to planes; along H a widening gather), the
// adjoint and the pseudo-inverses write it (scaled products, planes and phases back to
// rows, the division by the mask), the GAP step reads and updates it (skewed rows, phases,
// tiles), the shift and unshift move it (along H all but the forward take sample
// chunks): each path on every target, tensors one element off their allocation (no
// vector alignment), bitwise the float32 call on the same target.
TEST(HalfShiftSum, StoredXEveryPathOnEveryTargetMisaligned) {
  const Pair pairs[] = {{kBF16, kBF16}, {kF16, kF32}, {kF32, kF16}};
  ForEachHalfTarget([&] {
    for (const Geometry& g : StoredXPathShapes()) {
      for (bool cl : {false, true}) {
        for (const Pair& pair : pairs) {
          for (Op op : kOps) {
            Case c{g, cl, pair};
            c.lead = 1;
            SCOPED_TRACE(Describe(op, c));
            RunCase(op, c, 2);
          }
        }
      }
    }
  });
}

// bfloat16 keeps float's exponent range: values near FLT_MAX (sums that stay finite, and
// sums past it, Inf as the float result rounds) and bfloat16 subnormals, on every op and
// path, through the stored-x kernels of this CPU's target.
TEST(HalfShiftSum, BfloatNearFloatMaxAndSubnormal) {
  const Pair pairs[] = {{kBF16, kBF16}, {kBF16, kF32}, {kF32, kBF16}};
  for (const Geometry& g : StoredXPathShapes()) {
    const float magnitudes[] = {3.0e38f / static_cast<float>(g.C + 1), 3.0e38f, 3.0e-38f};
    for (float magnitude : magnitudes) {
      for (bool cl : {false, true}) {
        for (const Pair& pair : pairs) {
          for (Op op : kOps) {
            Case c{g, cl, pair};
            c.magnitude = magnitude;
            c.lead = 1;
            SCOPED_TRACE(Describe(op, c) + " magnitude " + std::to_string(magnitude));
            RunCase(op, c, 2);
          }
        }
      }
    }
  }
}

// x written past the last-level cache is streamed (non-temporal stores of the rounded
// values, peeled to a vector boundary): the adjoint and both pseudo-inverses on 27 MB of
// float x, half x on and off a vector boundary; shift and unshift writing float32.
TEST(HalfShiftSum, StreamedX) {
  const Geometry g{2, 8, 130, 3200, 2, false, NORMKIT_MASK_HW, 0.25};
  ASSERT_GE(g.B * g.C * g.H * g.W * 4, int64_t{24} << 20);
  const struct {
    Op op;
    bool channels_last;
    Pair pair;
    int64_t lead;
  } runs[] = {{Op::kAdjoint, false, {kBF16, kBF16}, 1},
              {Op::kAdjoint, true, {kF32, kF16}, 0},
              {Op::kPinvDBM, false, {kF16, kF16}, 0},
              {Op::kPinvDBM, true, {kBF16, kBF16}, 1},
              {Op::kPinvMP, true, {kF32, kBF16}, 3},
              // The stack or x in float32 past the threshold: shift and unshift stream it
              // (rows of the stack walked as one span, peeled once).
              {Op::kShift, false, {kBF16, kF32}, 1},
              {Op::kShift, true, {kF16, kF32}, 0},
              {Op::kUnshift, false, {kF16, kF32}, 3}};
  for (const auto& run : runs) {
    Case c{g, run.channels_last, run.pair};
    c.lead = run.lead;
    SCOPED_TRACE(Describe(run.op, c));
    RunCase(run.op, c, 2);
  }
}

// Streamed bfloat16 x (non-temporal stores of the rounded values): subnormal results
// (which AVX512_BF16's instruction reads as zero) on every target, 32 bytes off a cache
// line, and results near FLT_MAX.
TEST(HalfShiftSum, StreamedBfloatNearFloatMaxAndSubnormal) {
  const Geometry g{2, 8, 130, 3200, 2, false, NORMKIT_MASK_HW, 0.25};
  const auto run = [&](Op op, Pair pair, float magnitude, int64_t lead) {
    Case c{g, false, pair};
    c.lead = lead;
    c.magnitude = magnitude;
    SCOPED_TRACE(Describe(op, c) + " magnitude " + std::to_string(magnitude));
    RunCase(op, c, 2);
  };
  ForEachHalfTarget([&] { run(Op::kAdjoint, {kBF16, kBF16}, 3.0e-38f, 16); });
  run(Op::kPinvMP, {kF32, kBF16}, 3.0e-38f, 0);
  run(Op::kAdjoint, {kF32, kBF16}, 3.0e38f, 0);
}

// The same bits for any thread count.
TEST(HalfShiftSum, BitwiseIdenticalAcrossThreadCounts) {
  const Geometry g{3, 28, 40, 96, 2, false, NORMKIT_MASK_CHW, 1.0};
  for (Op op : {Op::kForward, Op::kGap}) {
    for (bool cl : {false, true}) {
      const int64_t n_in = op == Op::kForward ? g.B * g.C * g.H * g.W : g.B * g.Hout() * g.Wout();
      const int64_t n_out = op == Op::kForward ? g.B * g.Hout() * g.Wout() : g.B * g.C * g.H * g.W;
      std::vector<float> mask = RandomVector(g.MaskElems(), 5, 0.0f, 1.0f);
      const normkit_shift_sum_params p = ParamsFor(g, mask.data());
      const std::vector<float> v = RandomVector(n_in, 6), xv = RandomVector(n_out, 7);
      std::vector<std::vector<unsigned char>> results;
      for (int threads : {1, 2, 3, 8}) {
        Buffer in(kBF16, n_in), out(kBF16, n_out);
        for (int64_t i = 0; i < n_in; ++i) in.Set(i, v[static_cast<size_t>(i)]);
        for (int64_t i = 0; i < n_out; ++i) out.Set(i, xv[static_cast<size_t>(i)]);
        Context ctx(threads);
        ASSERT_EQ(Call(op, ctx.ctx, Case{g, cl, {kBF16, kBF16}}, p, &in, &out, nullptr),
                  NORMKIT_SUCCESS)
            << normkit_last_error();
        results.push_back(out.raw);
      }
      for (size_t i = 1; i < results.size(); ++i) {
        EXPECT_TRUE(results[i] == results[0])
            << OpName(op) << (cl ? " NHWC" : " NCHW") << ": thread count " << i << " differs";
      }
    }
  }
}

}  // namespace
}  // namespace normkit_test
