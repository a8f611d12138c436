// Argument checks shared by every op. Each returns a Status whose message reads
//   "<op>: <arg> <what> expected <expected>, got <given>"
// e.g. "paged_mqa_logits: q dtype expected f8_e4m3, got f32".
#pragma once
#include <cstdarg>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "dsattn/ops.h"
#include "dsattn/status.h"
#include "dsattn/tensor.h"

namespace dsattn {
namespace detail {

// printf-style message builder.
std::string strf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Status(kInvalidArgument, "<op>: " + printf(fmt, ...)).
Status invalid(const char* op, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
Status not_implemented(const char* op, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// The tensor must be present: non-null data (unless it has zero elements) and ndim > 0.
Status check_present(const char* op, const char* arg, const TensorView& t);
Status check_dtype(const char* op, const char* arg, const TensorView& t, DType expected);
Status check_dtype_in(const char* op, const char* arg, const TensorView& t,
                      std::initializer_list<DType> allowed);
Status check_ndim(const char* op, const char* arg, const TensorView& t, int ndim);
// shape entries < 0 are wildcards. Message shows the expected shape with '*' for wildcards.
Status check_shape(const char* op, const char* arg, const TensorView& t,
                   std::initializer_list<int64_t> shape);
Status check_contiguous(const char* op, const char* arg, const TensorView& t);
Status check_last_dim_contiguous(const char* op, const char* arg, const TensorView& t);
// All strides non-negative (no overlapping/negative views), as DLPack producers may hand over.
Status check_strides_nonneg(const char* op, const char* arg, const TensorView& t);

// Present + dtype + shape (wildcards allowed) + non-negative strides, in that order.
Status check_tensor(const char* op, const char* arg, const TensorView& t, DType dtype,
                    std::initializer_list<int64_t> shape);

// Resolves Backend::kAuto from the devices of the given (defined) tensors and rejects mixes:
// all defined tensors must share one device (and device id); kCpu requires host tensors and kCuda
// requires CUDA tensors and a CUDA build.
Status resolve_backend(const char* op, const Exec& ex, std::initializer_list<const TensorView*> tensors,
                       Backend* out);

// Workspace check for ops that need `needed` bytes of scratch.
Status check_workspace(const char* op, const Exec& ex, size_t needed);

}  // namespace detail
}  // namespace dsattn
