// dsattn — non-owning tensor views. Maps 1:1 onto a DLPack tensor (data, dtype, device, shape,
// strides in elements), so torch / cupy / jax / numpy arrays pass through without copies.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace dsattn {

enum class DType { kF32, kBF16, kF16, kF8E4M3, kU8, kI32, kI64 };
enum class Device { kCpu, kCuda };

// Bytes per element.
size_t dtype_size(DType t);
// "f32", "bf16", "f16", "f8_e4m3", "u8", "i32", "i64".
const char* dtype_name(DType t);
const char* device_name(Device d);

constexpr int kMaxDims = 8;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Device device = Device::kCpu;
  int device_id = 0;
  int ndim = 0;                 // 0 with data == nullptr means "absent" (optional arguments)
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};  // in elements

  bool defined() const { return data != nullptr || ndim > 0; }
  int64_t numel() const;
  int64_t size(int d) const { return shape[d < 0 ? d + ndim : d]; }
  int64_t stride(int d) const { return strides[d < 0 ? d + ndim : d]; }
  // True when the strides are the row-major strides of the shape (size-1 dims ignored).
  bool is_contiguous() const;
  // True when the last dimension has stride 1 (or size <= 1).
  bool last_dim_contiguous() const;
  template <typename T>
  T* ptr() const { return static_cast<T*>(data); }
};

// Builds a contiguous (row-major) view.
TensorView make_tensor(void* data, DType dtype, std::initializer_list<int64_t> shape,
                       Device device = Device::kCpu, int device_id = 0);
// Builds a view with explicit strides (in elements).
TensorView make_tensor_strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               std::initializer_list<int64_t> strides,
                               Device device = Device::kCpu, int device_id = 0);
// Shape as text: "[4, 1, 64, 128]".
std::string shape_str(const TensorView& t);

}  // namespace dsattn
