// Argument parsing for the dsattn command-line program. Header-only so that tests/cpu/test_cli.cpp
// can include it without linking the CLI's own sources. Nothing here calls into the library:
// values that need the library to validate (preset names) are checked by the commands.
//
// Rules: flags are `--name value` or `--name=value`; boolean flags take no value; `-h` is `--help`.
// Every error is one line naming the bad value and what is accepted.
#pragma once
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace dsattn {
namespace cli {

inline std::string join(const std::vector<std::string>& items, const char* sep = ", ") {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += sep;
    out += items[i];
  }
  return out;
}

struct FlagSpec {
  std::string name;        // without the leading "--"
  bool takes_value = true;
  std::string metavar;     // for --help ("N", "NAME")
  std::string help;
};

// Flags seen on the command line: name -> value ("" for boolean flags). Later repeats win.
using FlagValues = std::map<std::string, std::string>;

// "--batch, --context, --help"
inline std::string accepted_flags(const std::vector<FlagSpec>& specs) {
  std::vector<std::string> names;
  for (const FlagSpec& s : specs) names.push_back("--" + s.name);
  return join(names);
}

// Parses `args` against `specs`. Positional arguments are errors. Returns false with `*err` set.
inline bool parse_flags(const std::string& cmd, const std::vector<std::string>& args,
                        const std::vector<FlagSpec>& specs, FlagValues* out, std::string* err) {
  out->clear();
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    if (a == "-h") a = "--help";
    if (a.size() < 3 || a.compare(0, 2, "--") != 0) {
      *err = cmd + ": unexpected argument '" + args[i] + "' (accepted: " + accepted_flags(specs) + ")";
      return false;
    }
    std::string name = a.substr(2), value;
    bool has_inline = false;
    const size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_inline = true;
    }
    const FlagSpec* spec = nullptr;
    for (const FlagSpec& s : specs)
      if (s.name == name) spec = &s;
    if (!spec) {
      *err = cmd + ": unknown flag '--" + name + "' (accepted: " + accepted_flags(specs) + ")";
      return false;
    }
    if (spec->takes_value) {
      if (!has_inline) {
        if (i + 1 >= args.size()) {
          *err = cmd + ": flag '--" + name + "' needs a value (" + spec->metavar + ")";
          return false;
        }
        value = args[++i];
      }
    } else if (has_inline) {
      *err = cmd + ": flag '--" + name + "' takes no value, got '" + value + "'";
      return false;
    }
    (*out)[name] = value;
  }
  return true;
}

// Decimal integer in [lo, hi]; the whole text must be a number.
inline bool parse_int(const std::string& cmd, const std::string& flag, const std::string& text,
                      int64_t lo, int64_t hi, int64_t* out, std::string* err) {
  const std::string range = "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  if (text.empty()) {
    *err = cmd + ": --" + flag + " '' is not a number (accepted: " + range + ")";
    return false;
  }
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  const char c0 = text[0];
  const bool starts_ok = (c0 >= '0' && c0 <= '9') || c0 == '-' || c0 == '+';  // strtoll skips spaces
  if (!starts_ok || errno != 0 || end == text.c_str() || *end != '\0') {
    *err = cmd + ": --" + flag + " '" + text + "' is not a number (accepted: " + range + ")";
    return false;
  }
  if (v < lo || v > hi) {
    *err = cmd + ": --" + flag + " " + text + " is out of range (accepted: " + range + ")";
    return false;
  }
  *out = v;
  return true;
}

// `text` must be one of `accepted`.
inline bool check_choice(const std::string& cmd, const std::string& flag, const std::string& text,
                         const std::vector<std::string>& accepted, std::string* err) {
  for (const std::string& a : accepted)
    if (a == text) return true;
  *err = cmd + ": unknown " + flag + " '" + text + "' (accepted: " + join(accepted) + ")";
  return false;
}

// Help text for a flag list: one line per flag.
inline std::string flags_help(const std::vector<FlagSpec>& specs) {
  std::string out;
  for (const FlagSpec& s : specs) {
    std::string left = "  --" + s.name + (s.takes_value ? " " + s.metavar : "");
    if (left.size() < 28) left.resize(28, ' ');
    else left += "  ";
    out += left + s.help + "\n";
  }
  return out;
}

// ---------------------------------------------------------------- dsattn demo
enum class ParseResult { kRun, kHelp, kError };

struct DemoOptions {
  std::string preset = "deepseek-v4.1-flash";
  int batch = 4;
  int64_t context = 8192;  // tokens per request (request b holds context - b * kDemoContextStep)
  int next_n = 1;
  std::string backend = "auto";
  uint64_t seed = 1;
  bool check = true;       // cross-check against the CPU reference when running on the GPU
};

constexpr int kDemoMaxBatch = 256;
constexpr int64_t kDemoMaxContext = int64_t(1) << 22;  // 4M tokens
constexpr int kDemoMaxNextN = 8;

inline const std::vector<FlagSpec>& demo_flags() {
  static const std::vector<FlagSpec> specs = {
      {"preset", true, "NAME", "model preset (default deepseek-v4.1-flash; see `dsattn presets`)"},
      {"batch", true, "N", "requests in the decode batch, 1..256 (default 4)"},
      {"context", true, "TOKENS", "context length in tokens of request 0, 1..4194304 (default 8192)"},
      {"next-n", true, "N", "query tokens per request (MTP / speculative), 1..8 (default 1)"},
      {"backend", true, "auto|cpu|cuda", "where to run (default auto: cuda when available)"},
      {"seed", true, "N", "seed of the random caches and queries (default 1)"},
      {"no-check", false, "", "skip the CPU-reference cross-check of a GPU run"},
      {"help", false, "", "show this help"},
  };
  return specs;
}

inline ParseResult parse_demo_args(const std::vector<std::string>& args, DemoOptions* o,
                                   std::string* err) {
  const std::string cmd = "dsattn demo";
  FlagValues v;
  if (!parse_flags(cmd, args, demo_flags(), &v, err)) return ParseResult::kError;
  if (v.count("help")) return ParseResult::kHelp;
  int64_t n = 0;
  if (v.count("preset")) o->preset = v["preset"];
  if (v.count("batch")) {
    if (!parse_int(cmd, "batch", v["batch"], 1, kDemoMaxBatch, &n, err)) return ParseResult::kError;
    o->batch = static_cast<int>(n);
  }
  if (v.count("context")) {
    if (!parse_int(cmd, "context", v["context"], 1, kDemoMaxContext, &n, err)) return ParseResult::kError;
    o->context = n;
  }
  if (v.count("next-n")) {
    if (!parse_int(cmd, "next-n", v["next-n"], 1, kDemoMaxNextN, &n, err)) return ParseResult::kError;
    o->next_n = static_cast<int>(n);
  }
  if (v.count("backend")) {
    if (!check_choice(cmd, "--backend", v["backend"], {"auto", "cpu", "cuda"}, err))
      return ParseResult::kError;
    o->backend = v["backend"];
  }
  if (v.count("seed")) {
    if (!parse_int(cmd, "seed", v["seed"], 0, INT64_MAX, &n, err)) return ParseResult::kError;
    o->seed = static_cast<uint64_t>(n);
  }
  if (v.count("no-check")) o->check = false;
  return ParseResult::kRun;
}

// ---------------------------------------------------------------- dsattn bench
enum class BenchKind { kIndexer, kFused, kTopk, kMma, kMla };

// `args` follow "bench": "indexer [--fused] ...", "topk ...", "mma ..." or "mla ...". `--fused` may appear anywhere after
// "indexer" and is removed from the forwarded arguments. "--help" before the kind is kHelp.
inline ParseResult parse_bench_args(const std::vector<std::string>& args, BenchKind* kind,
                                    std::vector<std::string>* rest, std::string* err) {
  const std::string accepted = "indexer, indexer --fused, topk, mma, mla";
  rest->clear();
  if (args.empty()) {
    *err = "dsattn bench: missing benchmark name (accepted: " + accepted + ")";
    return ParseResult::kError;
  }
  if (args[0] == "--help" || args[0] == "-h") return ParseResult::kHelp;
  if (args[0] == "indexer") {
    *kind = BenchKind::kIndexer;
    for (size_t i = 1; i < args.size(); ++i) {
      if (args[i] == "--fused") *kind = BenchKind::kFused;
      else rest->push_back(args[i]);
    }
    return ParseResult::kRun;
  }
  const std::pair<const char*, BenchKind> plain[] = {
      {"topk", BenchKind::kTopk}, {"mma", BenchKind::kMma}, {"mla", BenchKind::kMla}};
  for (const auto& [name, k] : plain) {
    if (args[0] == name) {
      *kind = k;
      rest->assign(args.begin() + 1, args.end());
      return ParseResult::kRun;
    }
  }
  *err = "dsattn bench: unknown benchmark '" + args[0] + "' (accepted: " + accepted + ")";
  return ParseResult::kError;
}

}  // namespace cli
}  // namespace dsattn
