#include "api/validate.h"

#include <cstdint>
#include <cstdio>
#include <vector>

#include "common/cuda_arch.h"
#include "cuda/cuda_ops.h"

namespace dsattn {
namespace detail {

static std::string vstrf(const char* fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  const int n = std::vsnprintf(nullptr, 0, fmt, ap2);
  va_end(ap2);
  std::string s(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(&s[0], s.size() + 1, fmt, ap);
  return s;
}

std::string strf(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vstrf(fmt, ap);
  va_end(ap);
  return s;
}

Status invalid(const char* op, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vstrf(fmt, ap);
  va_end(ap);
  return Status(Code::kInvalidArgument, std::string(op) + ": " + s);
}

Status not_implemented(const char* op, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vstrf(fmt, ap);
  va_end(ap);
  return Status(Code::kNotImplemented, std::string(op) + ": " + s);
}

Status check_present(const char* op, const char* arg, const TensorView& t) {
  if (t.ndim <= 0) {
    if (t.ndim == 0 && t.data != nullptr) return invalid(op, "%s rank expected >= 1, got a 0-d tensor (a scalar)", arg);
    return invalid(op, "%s is required but was not given", arg);
  }
  if (t.ndim > kMaxDims) return invalid(op, "%s ndim expected <= %d, got %d", arg, kMaxDims, t.ndim);
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] < 0) return invalid(op, "%s shape %s has a negative dimension", arg, shape_str(t).c_str());
  }
  if (t.data == nullptr && t.numel() > 0) {
    return invalid(op, "%s data pointer is null for shape %s", arg, shape_str(t).c_str());
  }
  return Status::Ok();
}

Status check_dtype(const char* op, const char* arg, const TensorView& t, DType expected) {
  if (t.dtype != expected) {
    return invalid(op, "%s dtype expected %s, got %s", arg, dtype_name(expected), dtype_name(t.dtype));
  }
  return Status::Ok();
}

Status check_dtype_in(const char* op, const char* arg, const TensorView& t,
                      std::initializer_list<DType> allowed) {
  std::string names;
  for (DType d : allowed) {
    if (t.dtype == d) return Status::Ok();
    if (!names.empty()) names += " or ";
    names += dtype_name(d);
  }
  return invalid(op, "%s dtype expected %s, got %s", arg, names.c_str(), dtype_name(t.dtype));
}

Status check_ndim(const char* op, const char* arg, const TensorView& t, int ndim) {
  if (t.ndim != ndim) {
    return invalid(op, "%s rank expected %d, got %d (shape %s)", arg, ndim, t.ndim, shape_str(t).c_str());
  }
  return Status::Ok();
}

Status check_shape(const char* op, const char* arg, const TensorView& t,
                   std::initializer_list<int64_t> shape) {
  std::string want = "[";
  int i = 0;
  for (int64_t s : shape) {
    if (i++) want += ", ";
    want += s < 0 ? std::string("*") : std::to_string(s);
  }
  want += "]";
  bool ok = t.ndim == static_cast<int>(shape.size());
  i = 0;
  for (int64_t s : shape) {
    if (ok && s >= 0 && t.shape[i] != s) ok = false;
    ++i;
  }
  if (!ok) return invalid(op, "%s shape expected %s, got %s", arg, want.c_str(), shape_str(t).c_str());
  return Status::Ok();
}

Status check_contiguous(const char* op, const char* arg, const TensorView& t) {
  if (!t.is_contiguous()) {
    std::string st = "[";
    for (int i = 0; i < t.ndim; ++i) st += (i ? ", " : "") + std::to_string(t.strides[i]);
    st += "]";
    return invalid(op, "%s must be contiguous (row-major) for shape %s, got strides %s", arg,
                   shape_str(t).c_str(), st.c_str());
  }
  return Status::Ok();
}

Status check_last_dim_contiguous(const char* op, const char* arg, const TensorView& t) {
  if (!t.last_dim_contiguous()) {
    return invalid(op, "%s last-dimension stride expected 1, got %lld", arg,
                   static_cast<long long>(t.strides[t.ndim - 1]));
  }
  return Status::Ok();
}

Status check_strides_nonneg(const char* op, const char* arg, const TensorView& t) {
  for (int i = 0; i < t.ndim; ++i) {
    if (t.strides[i] < 0) {
      return invalid(op, "%s stride %d expected >= 0, got %lld", arg, i, static_cast<long long>(t.strides[i]));
    }
  }
  return Status::Ok();
}

Status check_tensor(const char* op, const char* arg, const TensorView& t, DType dtype,
                    std::initializer_list<int64_t> shape) {
  DSATTN_RETURN_IF_ERROR(check_present(op, arg, t));
  DSATTN_RETURN_IF_ERROR(check_dtype(op, arg, t, dtype));
  DSATTN_RETURN_IF_ERROR(check_shape(op, arg, t, shape));
  return check_strides_nonneg(op, arg, t);
}

Status resolve_backend(const char* op, const Exec& ex, std::initializer_list<const TensorView*> tensors,
                       Backend* out) {
  bool any = false;
  Device dev = Device::kCpu;
  int dev_id = 0;
  for (const TensorView* t : tensors) {
    if (t == nullptr || !t->defined()) continue;
    if (!any) {
      any = true;
      dev = t->device;
      dev_id = t->device_id;
    } else if (t->device != dev || (dev == Device::kCuda && t->device_id != dev_id)) {
      return invalid(op, "all tensors must be on one device: found %s:%d and %s:%d", device_name(dev),
                     dev_id, device_name(t->device), t->device_id);
    }
  }
  Backend b = ex.backend;
  if (b == Backend::kAuto) b = (any && dev == Device::kCuda) ? Backend::kCuda : Backend::kCpu;
  if (b == Backend::kCpu && any && dev == Device::kCuda) {
    return invalid(op, "backend cpu expected host tensors, got tensors on cuda:%d", dev_id);
  }
  if (b == Backend::kCuda) {
    if (any && dev != Device::kCuda) return invalid(op, "backend cuda expected CUDA tensors, got host tensors");
#if !DSATTN_WITH_CUDA
    return not_implemented(op, "this dsattn build has no CUDA kernels (built without nvcc)");
#else
    // The kernels launch on the calling thread's current device and size their grids by its SMs:
    // tensors of another device would be read through the wrong context (an illegal address, or
    // peer reads at best). Without a current device (no GPU) the CUDA calls report that themselves.
    const int cur = cuda::current_device();
    if (any && cur >= 0 && cur != dev_id) {
      return invalid(op, "tensors are on cuda:%d but the current CUDA device is cuda:%d (make cuda:%d current "
                     "before the call: cudaSetDevice, torch.cuda.device(...))", dev_id, cur, dev_id);
    }
    int major = 0, minor = 0;
    if (cur >= 0 && !cuda::device_has_code(cur, &major, &minor)) {
      return not_implemented(op, "this dsattn build has no GPU code for cuda:%d (compute capability %d.%d); it was "
                             "built for %s: rebuild with %s in DSATTN_CUDA_ARCHS", cur, major, minor,
                             arch_list_text(DSATTN_CUDA_ARCH_LIST).c_str(), arch_for_device(major, minor).c_str());
    }
#endif
  }
  *out = b;
  return Status::Ok();
}

Status check_workspace(const char* op, const Exec& ex, size_t needed) {
  if (needed == 0) return Status::Ok();
  if (ex.workspace == nullptr || ex.workspace_bytes < needed) {
    return invalid(op, "workspace expected >= %zu bytes, got %zu bytes%s", needed, ex.workspace_bytes,
                   ex.workspace == nullptr ? " (null pointer)" : "");
  }
  // The kernels carve their buffers at 256-byte offsets from it and read some 16 bytes at a time.
  if (reinterpret_cast<uintptr_t>(ex.workspace) % kWorkspaceAlignment != 0) {
    return invalid(op, "workspace expected %d-byte aligned, got address %p", kWorkspaceAlignment, ex.workspace);
  }
#if DSATTN_WITH_CUDA
  // check_workspace runs on the CUDA path only (the CPU ops take no workspace). Without a current
  // device (no GPU) the call reports that itself.
  const int cur = ex.workspace_device == kWorkspaceDeviceUnknown ? -1 : cuda::current_device();
  if (cur >= 0 && ex.workspace_device != cur) {
    const std::string got = ex.workspace_device == kWorkspaceDeviceHost
                                ? std::string("host memory")
                                : "memory of cuda:" + std::to_string(ex.workspace_device);
    return invalid(op, "workspace expected memory of the current device cuda:%d, got %s", cur, got.c_str());
  }
#endif
  return Status::Ok();
}

}  // namespace detail
}  // namespace dsattn
