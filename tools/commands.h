// Subcommands of the dsattn command-line program. Each takes the arguments after its name and
// returns the process exit code: 0 success, 1 a failed run or check, 2 a usage error.
#pragma once
#include <string>
#include <vector>

namespace dsattn {
namespace cli {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

int cmd_demo(const std::vector<std::string>& args);      // tools/demo.cpp
int cmd_geometry(const std::vector<std::string>& args);  // tools/cmd_geometry.cpp
int cmd_presets(const std::vector<std::string>& args);   // tools/cmd_geometry.cpp
int cmd_bench(const std::vector<std::string>& args);     // tools/cmd_bench.cpp

// Prints "dsattn <cmd>: <message>" to stderr and returns kExitUsage.
int usage_error(const std::string& message);

}  // namespace cli
}  // namespace dsattn
