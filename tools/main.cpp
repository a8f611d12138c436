// dsattn — command-line program: demo, geometry, presets, bench.
#include <cstdio>
#include <string>
#include <vector>

#include "cli_args.h"
#include "commands.h"
#include "common/cuda_arch.h"
#include "dsattn/ops.h"
#include "dsattn/version.h"

namespace dsattn {
namespace cli {

int usage_error(const std::string& message) {
  std::fprintf(stderr, "%s\n", message.c_str());
  return kExitUsage;
}

namespace {

const char kUsage[] =
    "usage: dsattn <command> [options]\n"
    "\n"
    "DeepSeek Sparse Attention (indexer -> top-k -> sparse MLA) for DeepSeek-V3.2 / V4 / V4.1.\n"
    "\n"
    "commands:\n"
    "  demo       one decode step in a preset's real cache geometry, cross-checked (--help for flags)\n"
    "  geometry   per-layer cache geometry of a preset (--preset NAME)\n"
    "  presets    list the model presets\n"
    "  bench      benchmarks (CUDA builds): bench indexer [--fused] [...], bench topk [...], bench mma [...]\n"
    "\n"
    "options:\n"
    "  --version  print the version and the build's backends\n"
    "  --help     show this help (every command takes --help too)\n";

int print_version() {
  std::printf("dsattn %s (backends: cpu%s%s; cuda device %s)\n", DSATTN_VERSION_STRING,
              DSATTN_WITH_CUDA ? ", cuda for " : "", detail::arch_list_text(cuda_architectures()).c_str(),
              cuda_available() ? "visible" : "not visible");
  return kExitOk;
}

}  // namespace
}  // namespace cli
}  // namespace dsattn

int main(int argc, char** argv) {
  using namespace dsattn::cli;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::fputs(kUsage, stderr);
    return kExitUsage;
  }
  const std::string cmd = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::fputs(kUsage, stdout);
    return kExitOk;
  }
  if (cmd == "--version" || cmd == "version") return print_version();
  if (cmd == "demo") return cmd_demo(rest);
  if (cmd == "geometry") return cmd_geometry(rest);
  if (cmd == "presets") return cmd_presets(rest);
  if (cmd == "bench") return cmd_bench(rest);
  const char* what = cmd.compare(0, 1, "-") == 0 ? "option" : "command";
  return usage_error(std::string("dsattn: unknown ") + what + " '" + cmd +
                     "' (accepted: demo, geometry, presets, bench, --version, --help)");
}
