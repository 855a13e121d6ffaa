// The run config's life cycle: defaults < YAML file < overrides, validation, the resolved YAML
// and the run directory that records it (config.yaml).
#include "unstuck/config/run_config.h"

#include <fstream>
#include <system_error>

#include "unstuck/common/error.h"
#include "unstuck/config/config.h"

namespace unstuck {

RunConfig load_run_config(const std::filesystem::path& path, const std::vector<std::string>& overrides) {
  RunConfig config;
  const config::Field root = config::bind(config);
  if (!path.empty()) config::load_yaml_file(root, path);
  for (const auto& text : overrides) config::apply_override(root, text);
  validate(config);
  return config;
}

std::string resolved_yaml(const RunConfig& config, bool with_docs) {
  RunConfig copy = config;  // bind() needs a mutable object; dumping only reads it
  return "# Resolved run config (defaults < file < overrides), written by unstuck " UNSTUCK_VERSION ".\n" +
         config::to_yaml(config::bind(copy), with_docs);
}

std::string run_config_docs(bool markdown) {
  RunConfig defaults;
  const config::Field root = config::bind(defaults);
  return markdown ? config::docs_markdown(root) : config::docs_text(root);
}

std::filesystem::path run_dir(const RunConfig& config) {
  return std::filesystem::path(config.run.output_dir) / config.run.name;
}

std::filesystem::path prepare_run_dir(const RunConfig& config) {
  const std::filesystem::path dir = run_dir(config);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    throw UserError("cannot create run directory " + dir.string() + ": " + ec.message() +
                    " (check run.output_dir and run.name)");
  }
  // Write then rename, so a crash never leaves a half-written config.yaml behind.
  const std::filesystem::path file = dir / "config.yaml";
  const std::filesystem::path tmp = dir / "config.yaml.tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << resolved_yaml(config);
    if (!out.flush()) throw UserError("cannot write " + tmp.string() + " (check run.output_dir)");
  }
  std::filesystem::rename(tmp, file, ec);
  if (ec) throw UserError("cannot write " + file.string() + ": " + ec.message());
  return dir;
}

}  // namespace unstuck
