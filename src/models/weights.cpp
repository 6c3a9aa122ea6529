#include "models/weights.h"

#include <cstring>

#include "core/error.h"
#include "ops/ops.h"

namespace sluice {

namespace {
WeightFormat float_format(const TensorView& v) {
    switch (v.dtype()) {
        case DType::F32: return WeightFormat::F32;
        case DType::BF16: return WeightFormat::BF16;
        case DType::F16: return WeightFormat::F16;
        default:
            fail(*v.path, ": tensor '", v.name(), "' has dtype ", dtype_name(v.dtype()),
                 ", expected F32, BF16 or F16");
    }
}
// compressed-tensors records the unpacked shape in `<prefix>.weight_shape` (I32 or I64 [2]); it must agree.
void check_weight_shape(const Checkpoint& ck, const std::string& prefix, int64_t rows, int64_t cols) {
    const std::string name = prefix + ".weight_shape";
    if (!ck.has(name)) return;
    TensorView v = ck.get(name, {2});
    int64_t shape[2];
    for (int i = 0; i < 2; ++i) {
        if (v.dtype() == DType::I32) {
            int32_t x;
            std::memcpy(&x, v.data + 4 * i, 4);
            shape[i] = x;
        } else if (v.dtype() == DType::I64) {
            std::memcpy(&shape[i], v.data + 8 * i, 8);
        } else {
            fail(*v.path, ": tensor '", name, "' has dtype ", dtype_name(v.dtype()), ", expected I32 or I64");
        }
    }
    SLUICE_CHECK(shape[0] == rows && shape[1] == cols, *v.path, ": tensor '", name, "' says [", shape[0], ", ",
                 shape[1], "], the model expects [", rows, ", ", cols, "]");
}
}  // namespace

Weight bind_matrix(const Checkpoint& ck, const std::string& name, int64_t rows, int64_t cols) {
    TensorView v = ck.get(name, {rows, cols});
    return {.format = float_format(v), .rows = rows, .cols = cols, .data = v.data};
}

Weight bind_stacked(const Checkpoint& ck, const std::string& name, int64_t n, int64_t rows, int64_t cols) {
    TensorView v = ck.get(name, {n, rows, cols});
    return {.format = float_format(v), .rows = n * rows, .cols = cols, .data = v.data};
}

Weight bind_linear(const Checkpoint& ck, const std::string& prefix, int64_t rows, int64_t cols) {
    const std::string plain = prefix + ".weight";
    if (ck.has(plain)) {
        TensorView v = ck.get(plain, {rows, cols});
        if (v.dtype() == DType::F8_E4M3) {
            const std::string sname = prefix + ".weight_scale_inv";
            SLUICE_CHECK(ck.has(sname), ck.dir(), ": FP8 tensor '", plain, "' has no '", sname, "'");
            TensorView s = ck.get(sname, {(rows + 127) / 128, (cols + 127) / 128});
            SLUICE_CHECK(s.dtype() == DType::F32, *s.path, ": tensor '", sname, "' has dtype ",
                         dtype_name(s.dtype()), ", expected F32");
            return {.format = WeightFormat::FP8_E4M3_B128, .rows = rows, .cols = cols, .data = v.data,
                    .scales = s.data};
        }
        return {.format = float_format(v), .rows = rows, .cols = cols, .data = v.data};
    }
    const std::string packed = prefix + ".weight_packed";
    const std::string sname = prefix + ".weight_scale";
    if (ck.has(packed)) {
        TensorView p = ck.get(packed);
        SLUICE_CHECK(cols % 32 == 0, ck.dir(), ": tensor '", packed, "': input width ", cols,
                     " is not a multiple of the 32-element group");
        SLUICE_CHECK(ck.has(sname), ck.dir(), ": packed tensor '", packed, "' has no '", sname, "'");
        check_weight_shape(ck, prefix, rows, cols);
        if (p.dtype() == DType::U8) {
            ck.get(packed, {rows, cols / 2});
            TensorView s = ck.get(sname, {rows, cols / 32});
            SLUICE_CHECK(s.dtype() == DType::U8 || s.dtype() == DType::F8_E8M0, *s.path, ": tensor '", sname,
                         "' has dtype ", dtype_name(s.dtype()), ", expected U8 (E8M0 scales)");
            return {.format = WeightFormat::MXFP4, .rows = rows, .cols = cols, .data = p.data, .scales = s.data};
        }
        if (p.dtype() == DType::I32) {
            ck.get(packed, {rows, cols / 8});
            TensorView s = ck.get(sname, {rows, cols / 32});
            SLUICE_CHECK(s.dtype() == DType::BF16, *s.path, ": tensor '", sname, "' has dtype ",
                         dtype_name(s.dtype()), ", expected BF16 group scales");
            return {.format = WeightFormat::INT4_G32, .rows = rows, .cols = cols, .data = p.data, .scales = s.data};
        }
        fail(*p.path, ": tensor '", packed, "' has dtype ", dtype_name(p.dtype()),
             ", expected U8 (MXFP4) or I32 (INT4 pack-quantized)");
    }
    fail(ck.dir(), ": tensor '", plain, "' not found in the checkpoint");
}

Weight bind_mxfp4_stacked(const Checkpoint& ck, const std::string& prefix, int64_t n, int64_t rows, int64_t cols) {
    const std::string bname = prefix + "_blocks", sname = prefix + "_scales";
    SLUICE_CHECK(cols % 32 == 0, ck.dir(), ": tensor '", bname, "': input width ", cols,
                 " is not a multiple of the 32-element MXFP4 block");
    TensorView b = ck.get(bname, {n, rows, cols / 32, 16});
    TensorView s = ck.get(sname, {n, rows, cols / 32});
    SLUICE_CHECK(b.dtype() == DType::U8, *b.path, ": tensor '", bname, "' has dtype ", dtype_name(b.dtype()),
                 ", expected U8 (packed FP4 pairs)");
    SLUICE_CHECK(s.dtype() == DType::U8 || s.dtype() == DType::F8_E8M0, *s.path, ": tensor '", sname, "' has dtype ",
                 dtype_name(s.dtype()), ", expected U8 (E8M0 scales)");
    return {.format = WeightFormat::MXFP4, .rows = n * rows, .cols = cols, .data = b.data, .scales = s.data};
}

std::vector<ExpertWeights> bind_fused_experts(const Checkpoint& ck, const std::string& prefix, int64_t n_experts,
                                              int64_t inter, int64_t hidden) {
    std::vector<ExpertWeights> out;
    if (!ck.has(prefix + "gate_up_proj")) return out;
    const Weight gu = bind_stacked(ck, prefix + "gate_up_proj", n_experts, 2 * inter, hidden);
    const Weight dn = bind_stacked(ck, prefix + "down_proj", n_experts, hidden, inter);
    for (int64_t e = 0; e < n_experts; ++e)
        out.push_back({weight_rows(gu, e * 2 * inter, inter), weight_rows(gu, e * 2 * inter + inter, inter),
                       weight_rows(dn, e * hidden, hidden)});
    return out;
}

Weight weight_rows(const Weight& w, int64_t row0, int64_t n) {
    SLUICE_ASSERT(row0 >= 0 && n >= 0 && row0 + n <= w.rows, "rows ", row0, "+", n, " of ", w.rows);
    Weight out = w;
    out.rows = n;
    Weight one = w;
    one.rows = 1;
    switch (w.format) {
        case WeightFormat::FP8_E4M3_B128:
            SLUICE_ASSERT(row0 % 128 == 0, "FP8 row slice must start on a 128-row block");
            out.data = w.data + uint64_t(row0) * uint64_t(w.cols);
            out.scales = w.scales + uint64_t(row0 / 128) * uint64_t((w.cols + 127) / 128) * 4;
            return out;
        default:
            out.data = w.data + uint64_t(row0) * one.data_bytes();
            if (w.scales) out.scales = w.scales + uint64_t(row0) * one.scale_bytes();
            return out;
    }
}

std::vector<float> load_f32(const Checkpoint& ck, const std::string& name, const std::vector<int64_t>& shape) {
    TensorView v = ck.get(name, shape);
    int64_t n = 1;
    for (auto d : shape) n *= d;
    const Weight w{.format = float_format(v), .rows = 1, .cols = n, .data = v.data};
    std::vector<float> out(static_cast<size_t>(n));
    if (n > 0) ops::ref::dequantize_row(w, 0, out.data());
    return out;
}

}  // namespace sluice
