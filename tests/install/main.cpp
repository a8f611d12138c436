// Built against the installed dsattn package only (tests/install/check.cmake): the umbrella header
// compiles on its own, and a top-k over a host array returns the expected indices, sorted, with the
// smaller index first on a tie. Prints "consumer ok <version>" and exits 0, or says what differed.
#include <dsattn/dsattn.h>

#include <cstdio>
#include <string>
#include <vector>

int main() {
  std::vector<float> logits = {0.5f, 3.0f, -1.0f, 3.0f, 2.0f, 7.0f};
  std::vector<int32_t> indices(3, -7);
  dsattn::TopkParams p;
  p.logits = dsattn::make_tensor(logits.data(), dsattn::DType::kF32, {1, 6});
  p.k = 3;
  p.indices = dsattn::make_tensor(indices.data(), dsattn::DType::kI32, {1, 3});
  p.sorted = true;
  dsattn::Exec ex;
  ex.backend = dsattn::Backend::kCpu;
  size_t bytes = 0;
  const dsattn::Status q = dsattn::topk_workspace(p, ex, &bytes);
  std::vector<unsigned char> workspace(bytes);
  ex.workspace = workspace.data();
  ex.workspace_bytes = bytes;
  const dsattn::Status st = q.ok() ? dsattn::topk(p, ex) : q;
  if (!st.ok()) {
    std::printf("consumer: topk failed: %s\n", st.message.c_str());
    return 1;
  }
  const int32_t want[3] = {5, 1, 3};
  for (int i = 0; i < 3; ++i) {
    if (indices[i] != want[i]) {
      std::printf("consumer: indices[%d] expected %d, got %d\n", i, want[i], indices[i]);
      return 1;
    }
  }
  p.k = 0;  // a bad argument comes back as a Status naming the op
  const dsattn::Status bad = dsattn::topk(p, ex);
  if (bad.ok() || bad.message.find("topk") == std::string::npos) {
    std::printf("consumer: k = 0 expected an error naming topk, got \"%s\"\n", bad.message.c_str());
    return 1;
  }
  std::printf("consumer ok %s\n", DSATTN_VERSION_STRING);
  return 0;
}
