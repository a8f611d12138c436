// dsattn — status type returned by every public function.
#pragma once
#include <string>
#include <utility>

namespace dsattn {

enum class Code {
  kOk = 0,
  kInvalidArgument,   // bad shape / dtype / stride / value: the caller's fault
  kNotImplemented,    // valid request this build or backend cannot serve
  kCudaError,         // a CUDA runtime call failed
  kInternal,          // a bug in dsattn
};

const char* code_name(Code c);

struct Status {
  Code code = Code::kOk;
  std::string message;

  Status() = default;
  Status(Code c, std::string m) : code(c), message(std::move(m)) {}
  static Status Ok() { return Status(); }
  bool ok() const { return code == Code::kOk; }
  // "invalid argument: paged_mqa_logits: q dtype expected f8_e4m3, got f32"
  std::string to_string() const;
};

// Exception used by the C++ convenience layer (`dsattn::check(status)`).
class Error : public std::exception {
 public:
  explicit Error(Status s) : status_(std::move(s)), what_(status_.to_string()) {}
  const char* what() const noexcept override { return what_.c_str(); }
  const Status& status() const { return status_; }

 private:
  Status status_;
  std::string what_;
};

// Throws dsattn::Error when `s` is not ok.
inline void check(const Status& s) {
  if (!s.ok()) throw Error(s);
}

}  // namespace dsattn

#define DSATTN_RETURN_IF_ERROR(expr)            \
  do {                                          \
    ::dsattn::Status _dsattn_st = (expr);       \
    if (!_dsattn_st.ok()) return _dsattn_st;    \
  } while (0)
