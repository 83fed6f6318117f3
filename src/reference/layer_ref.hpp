// CPU reference of the DeepSeek-V3.2 attention layer (include/mla/layer.hpp):
// the dense pieces (projections, norms, Hadamard) in fp64, composed with the
// library's attention, cache and indexer operations on CPU tensors.
#pragma once
#include <cstdint>
#include <vector>

#include "mla/layer.hpp"

namespace mla::reference {

// y[n, o] = sum_i W[o, i] x[n, i] for N rows; W [out, in] any float dtype.
void linear(const TensorView& w, const double* x, int64_t n_rows, double* y);
// In place over rows of width `dim`: x * rsqrt(mean(x^2) + eps) * weight.
void rms_norm(double* x, int64_t n_rows, int64_t dim, const TensorView& weight, double eps);
// In place over rows of width `dim`: (x - mean) * rsqrt(var + eps) * weight + bias.
void layer_norm(double* x, int64_t n_rows, int64_t dim, const TensorView& weight,
                const TensorView& bias, double eps);
// In place: the Sylvester-order Hadamard transform of x[0, n) times n^-0.5
// (n a power of two), as fast_hadamard_transform computes it.
void hadamard_rotate(double* x, int n);

// CPU backend of layer_forward (arguments validated, CPU tensors).
Status layer_forward(const LayerForwardArgs& args);

}  // namespace mla::reference
