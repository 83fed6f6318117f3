#include "cuda/prefill/decompress_gemm.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <climits>
#include <map>

#include "common/validate.hpp"

namespace mla::cuda::prefill {
namespace {

// cuBLAS handles are costly to create (milliseconds) and not thread-safe to
// share while setting streams, so each host thread keeps one per device.
Status handle_for_current_device(cublasHandle_t* out) {
  thread_local std::map<int, cublasHandle_t> handles;
  int dev = 0;
  cudaError_t ce = cudaGetDevice(&dev);
  if (ce != cudaSuccess)
    return detail::error(Errc::cuda_error, "decompress: cudaGetDevice: {}", cudaGetErrorString(ce));
  auto it = handles.find(dev);
  if (it == handles.end()) {
    cublasHandle_t h = nullptr;
    cublasStatus_t st = cublasCreate(&h);
    if (st != CUBLAS_STATUS_SUCCESS)
      return detail::error(Errc::cuda_error, "decompress: cublasCreate: {}",
                           cublasGetStatusString(st));
    it = handles.emplace(dev, h).first;
  }
  *out = it->second;
  return Status::Ok();
}

}  // namespace

Status decompress_gemm(const DecompressGemm& g, void* stream) {
  if (g.n == 0 || g.rows_out == 0) return Status::Ok();
  if (g.n > INT_MAX || g.rows_out > INT_MAX || g.c_kv_row_stride > INT_MAX ||
      g.out_row_stride > INT_MAX)
    return detail::error(Errc::unsupported,
                         "decompress: N {} / rows {} / strides past the 32-bit cuBLAS interface",
                         g.n, g.rows_out);
  cublasHandle_t h = nullptr;
  MLA_TRY(handle_for_current_device(&h));
  cublasStatus_t st = cublasSetStream(h, static_cast<cudaStream_t>(stream));
  if (st != CUBLAS_STATUS_SUCCESS)
    return detail::error(Errc::cuda_error, "decompress: cublasSetStream: {}",
                         cublasGetStatusString(st));
  // Row-major out[N, R] = c_kv[N, K] * W[R, K]^T is, in cuBLAS's column-major
  // terms, out^T[R, N] = op_T(W^T as [K, R]) * (c_kv^T as [K, N]).
  const float alpha = 1.f, beta = 0.f;
  st = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(g.rows_out), int(g.n), int(g.d_c), &alpha, g.w,
                    CUDA_R_16BF, int(g.d_c), g.c_kv, CUDA_R_16BF, int(g.c_kv_row_stride), &beta,
                    g.out, CUDA_R_16BF, int(g.out_row_stride), CUBLAS_COMPUTE_32F,
                    CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS)
    return detail::error(Errc::cuda_error, "decompress: cublasGemmEx (N {}, rows {}, d_c {}): {}",
                         g.n, g.rows_out, g.d_c, cublasGetStatusString(st));
  return Status::Ok();
}

}  // namespace mla::cuda::prefill
