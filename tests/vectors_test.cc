// SPDX-License-Identifier: Apache-2.0
// Runs the golden vectors of tests/vectors/ (float32 inputs, float64 expected outputs
// from NumPy) through the C API. The CUDA tests read the same files.
#include "vectors.h"

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "test_util.h"

namespace normkit_test {
namespace {

std::string VectorPath(const char* file) {
  return std::string(NORMKIT_VECTORS_DIR) + "/" + file;
}

// Within 1e-5 of the expected value, relative to max(|expected|, 1).
void ExpectClose(const std::vector<float>& got, const std::vector<double>& want,
                 const std::string& name) {
  ASSERT_EQ(got.size(), want.size()) << name;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = 1e-5 * std::max(1.0, std::fabs(want[i]));
    if (!(std::fabs(got[i] - want[i]) <= tol) && ++bad <= 5) {
      ADD_FAILURE() << name << ": element " << i << " got " << got[i] << " want " << want[i];
    }
  }
}

TEST(GoldenVectors, GroupNorm) {
  const auto cases = ReadVectorFile(VectorPath("group_norm.txt"));
  ASSERT_GE(cases.size(), 10u) << "cannot read " << VectorPath("group_norm.txt");
  for (const auto& k : cases) {
    SCOPED_TRACE(k.name);
    const auto shape = k.Shape();
    const auto layout = static_cast<normkit_layout>(static_cast<int>(k.Scalar("layout")));
    std::vector<float> x = k.Floats("x"), y(x.size());
    const std::vector<float> gamma = k.FloatsOrEmpty("gamma");
    const std::vector<float> beta = k.FloatsOrEmpty("beta");
    normkit_tensor xt = Desc(x.data(), layout, shape), yt = Desc(y.data(), layout, shape);
    for (int threads : {1, 2}) {
      Context ctx(threads);
      ASSERT_EQ(normkit_group_norm(
                    ctx.ctx, &xt, static_cast<int64_t>(k.Scalar("groups")), DataOrNull(gamma),
                    DataOrNull(beta), static_cast<float>(k.Scalar("eps")),
                    static_cast<int32_t>(k.Scalar("activation")), &yt, nullptr, nullptr),
                NORMKIT_SUCCESS)
          << normkit_last_error();
      ExpectClose(y, k.arrays.at("y"), k.name);
    }
  }
}

TEST(GoldenVectors, LayerAndRmsNorm) {
  const auto cases = ReadVectorFile(VectorPath("row_norm.txt"));
  ASSERT_GE(cases.size(), 5u) << "cannot read " << VectorPath("row_norm.txt");
  for (const auto& k : cases) {
    SCOPED_TRACE(k.name);
    const auto shape = k.Shape();
    std::vector<float> x = k.Floats("x"), y(x.size());
    const std::vector<float> gamma = k.FloatsOrEmpty("gamma");
    const std::vector<float> beta = k.FloatsOrEmpty("beta");
    normkit_tensor xt = Desc(x.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, shape),
                   yt = Desc(y.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, shape);
    const float eps = static_cast<float>(k.Scalar("eps"));
    const float* gp = DataOrNull(gamma);
    const normkit_status st =
        k.op == "rms_norm"
            ? normkit_rms_norm(nullptr, &xt, gp, eps, &yt, nullptr)
            : normkit_layer_norm(nullptr, &xt, gp, DataOrNull(beta), eps, &yt, nullptr, nullptr);
    ASSERT_EQ(st, NORMKIT_SUCCESS) << normkit_last_error();
    ExpectClose(y, k.arrays.at("y"), k.name);
  }
}

// Batch norm in training mode: the forward (y, running averages, saved statistics) and
// the backward (dx, grad_gamma, grad_beta from the saved statistics), 1 and 2 threads.
TEST(GoldenVectors, BatchNormTraining) {
  const auto cases = ReadVectorFile(VectorPath("batch_norm_training.txt"));
  ASSERT_GE(cases.size(), 12u) << "cannot read " << VectorPath("batch_norm_training.txt");
  for (const auto& k : cases) {
    SCOPED_TRACE(k.name);
    const auto shape = k.Shape();
    const auto layout = static_cast<normkit_layout>(static_cast<int>(k.Scalar("layout")));
    std::vector<float> x = k.Floats("x"), out(x.size());
    const std::vector<float> gamma = k.Floats("gamma");
    const size_t C = gamma.size();
    normkit_tensor xt = Desc(x.data(), layout, shape), ot = Desc(out.data(), layout, shape);
    for (int threads : {1, 2}) {
      Context ctx(threads);
      if (k.op == "batch_norm_training") {
        std::vector<float> rm = k.Floats("running_mean"), rv = k.Floats("running_var");
        std::vector<float> sm(C), sr(C);
        ASSERT_EQ(normkit_batch_norm_training(ctx.ctx, &xt, gamma.data(), k.Floats("beta").data(),
                                              static_cast<float>(k.Scalar("eps")),
                                              static_cast<float>(k.Scalar("momentum")), rm.data(),
                                              rv.data(), &ot, sm.data(), sr.data()),
                  NORMKIT_SUCCESS)
            << normkit_last_error();
        ExpectClose(out, k.arrays.at("y"), k.name + " y");
        ExpectClose(rm, k.arrays.at("running_mean_out"), k.name + " running_mean");
        ExpectClose(rv, k.arrays.at("running_var_out"), k.name + " running_var");
        ExpectClose(sm, k.arrays.at("save_mean"), k.name + " save_mean");
        ExpectClose(sr, k.arrays.at("save_rstd"), k.name + " save_rstd");
      } else {
        std::vector<float> dy = k.Floats("dy"), gg(C), gb(C);
        const normkit_tensor dyt = Desc(dy.data(), layout, shape);
        ASSERT_EQ(normkit_batch_norm_training_backward(
                      ctx.ctx, &xt, &dyt, k.Floats("save_mean").data(),
                      k.Floats("save_rstd").data(), gamma.data(), &ot, gg.data(), gb.data()),
                  NORMKIT_SUCCESS)
            << normkit_last_error();
        ExpectClose(out, k.arrays.at("dx"), k.name + " dx");
        ExpectClose(gg, k.arrays.at("grad_gamma"), k.name + " grad_gamma");
        ExpectClose(gb, k.arrays.at("grad_beta"), k.name + " grad_beta");
      }
    }
  }
}

TEST(GoldenVectors, ShiftSum) {
  const auto cases = ReadVectorFile(VectorPath("shift_sum.txt"));
  ASSERT_GE(cases.size(), 6u) << "cannot read " << VectorPath("shift_sum.txt");
  for (const auto& k : cases) {
    SCOPED_TRACE(k.name);
    const auto shape = k.Shape();  // B, C, H, W
    std::vector<float> x = k.Floats("x");
    const std::vector<float> mask = k.FloatsOrEmpty("mask");
    normkit_shift_sum_params params;
    normkit_shift_sum_params_init(&params, static_cast<int64_t>(k.Scalar("step")));
    params.axis = static_cast<int32_t>(k.Scalar("axis"));
    params.scale = k.Scalar("scale");
    params.mask_kind = static_cast<int32_t>(k.Scalar("mask_kind"));
    params.mask = DataOrNull(mask);
    const int64_t spread = (shape[1] - 1) * std::abs(static_cast<int64_t>(k.Scalar("step")));
    const bool along_h = params.axis == NORMKIT_SHIFT_ALONG_H;
    const std::vector<int64_t> yshape = {shape[0], 1, shape[2] + (along_h ? spread : 0),
                                         shape[3] + (along_h ? 0 : spread)};
    std::vector<float> y(static_cast<size_t>(Numel(yshape)));
    normkit_tensor xt = Desc(x.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, shape),
                   yt = Desc(y.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, yshape);
    ASSERT_EQ(normkit_shift_sum(nullptr, &xt, &params, &yt), NORMKIT_SUCCESS)
        << normkit_last_error();
    ExpectClose(y, k.arrays.at("y"), k.name);
  }
}

}  // namespace
}  // namespace normkit_test
