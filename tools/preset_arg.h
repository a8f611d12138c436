// Preset lookup for the commands: an unknown name gives a one-line error listing the presets.
#pragma once
#include <string>

#include "cli_args.h"
#include "dsattn/geometry.h"

namespace dsattn {
namespace cli {

inline bool lookup_preset(const std::string& cmd, const std::string& name, ModelPreset* out,
                          std::string* err) {
  if (!check_choice(cmd, "--preset", name, preset_names(), err)) return false;
  const Status st = get_preset(name, out);
  if (!st.ok()) {
    *err = cmd + ": " + st.to_string();
    return false;
  }
  return true;
}

}  // namespace cli
}  // namespace dsattn
