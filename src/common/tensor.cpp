#include <cstdio>
#include <string>

#include "dsattn/formats.h"
#include "dsattn/ops.h"
#include "dsattn/status.h"
#include "dsattn/tensor.h"

namespace dsattn {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kF8E4M3: return 1;
    case DType::kU8: return 1;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kF8E4M3: return "f8_e4m3";
    case DType::kU8: return "u8";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
  }
  return "?";
}

const char* device_name(Device d) { return d == Device::kCuda ? "cuda" : "cpu"; }

const char* code_name(Code c) {
  switch (c) {
    case Code::kOk: return "ok";
    case Code::kInvalidArgument: return "invalid argument";
    case Code::kNotImplemented: return "not implemented";
    case Code::kCudaError: return "CUDA error";
    case Code::kInternal: return "internal error";
  }
  return "?";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(code_name(code)) + ": " + message;
}

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::kAuto: return "auto";
    case Backend::kCpu: return "cpu";
    case Backend::kCuda: return "cuda";
  }
  return "?";
}

const char* indexer_format_name(IndexerFormat f) { return f == IndexerFormat::kFp8 ? "fp8" : "mxfp4"; }
const char* latent_format_name(LatentFormat f) { return f == LatentFormat::kV4Fp8 ? "v4_fp8" : "v32_fp8"; }

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t expect = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != expect) return false;
    expect *= shape[i];
  }
  return true;
}

bool TensorView::last_dim_contiguous() const {
  return ndim == 0 || shape[ndim - 1] <= 1 || strides[ndim - 1] == 1;
}

TensorView make_tensor(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device,
                       int device_id) {
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.device_id = device_id;
  t.ndim = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  int64_t st = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.strides[d] = st;
    st *= t.shape[d];
  }
  return t;
}

TensorView make_tensor_strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               std::initializer_list<int64_t> strides, Device device, int device_id) {
  TensorView t = make_tensor(data, dtype, shape, device, device_id);
  int i = 0;
  for (int64_t s : strides) {
    if (i < t.ndim) t.strides[i] = s;
    ++i;
  }
  return t;
}

std::string shape_str(const TensorView& t) {
  std::string s = "[";
  for (int i = 0; i < t.ndim; ++i) {
    if (i) s += ", ";
    s += std::to_string(t.shape[i]);
  }
  return s + "]";
}

}  // namespace dsattn
