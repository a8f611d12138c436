#include "common/cuda_arch.h"

#include <cctype>

namespace dsattn {
namespace detail {

namespace {
// Calls fn(entry) for each entry of `list` (separators ',' and ';', spaces ignored).
template <class Fn>
void for_each_entry(const std::string& list, Fn&& fn) {
  std::string cur;
  for (char c : list + ",") {
    if (c == ',' || c == ';') {
      if (!cur.empty()) fn(cur);
      cur.clear();
    } else if (!std::isspace(static_cast<unsigned char>(c))) {
      cur += c;
    }
  }
}

// Whether sm code of entry `e` ("89", "90a", "120f") runs on major.minor.
bool entry_runs_on(const std::string& e, int major, int minor) {
  size_t digits = 0;
  while (digits < e.size() && std::isdigit(static_cast<unsigned char>(e[digits]))) ++digits;
  if (digits < 2 || digits > 3 || e.size() > digits + 1) return false;
  const char suffix = e.size() > digits ? e[digits] : '\0';
  if (suffix != '\0' && suffix != 'a' && suffix != 'f') return false;
  const int n = std::stoi(e.substr(0, digits));
  const int e_major = n / 10, e_minor = n % 10;
  if (e_major != major) return false;
  return suffix == 'a' ? minor == e_minor : minor >= e_minor;
}
}  // namespace

bool arch_list_runs_on(const std::string& list, int major, int minor) {
  bool runs = false;
  for_each_entry(list, [&](const std::string& e) { runs = runs || entry_runs_on(e, major, minor); });
  return runs;
}

std::string arch_for_device(int major, int minor) {
  if (major == 9 && minor == 0) return "90a";
  if (major == 10 || major == 12) return std::to_string(major) + "0f";
  return std::to_string(major) + std::to_string(minor);
}

std::string arch_list_text(const std::string& list) {
  std::string out;
  for_each_entry(list, [&](const std::string& e) { out += (out.empty() ? "" : ", ") + e; });
  return out;
}

}  // namespace detail
}  // namespace dsattn
