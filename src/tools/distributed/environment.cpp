#include "src/tools/distributed/environment.h"

#include <vector>

#include "src/tools/cli.h"

namespace xllm_kernel::tools::distributed {
namespace {

int parse_int(const std::string& name, const std::string& value, int min, int max) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || v < min || v > max) {
    throw UsageError("--distributed: " + name + "='" + value + "' is not an integer in [" + std::to_string(min) + ", " +
                     std::to_string(max) + "]");
  }
  return static_cast<int>(v);
}

}  // namespace

RankEnvironment rank_environment(const std::function<const char*(const char*)>& getenv) {
  std::vector<std::string> missing;
  auto get = [&](const char* name) -> std::string {
    const char* v = getenv(name);
    if (v == nullptr || *v == '\0') {
      missing.push_back(name);
      return "";
    }
    return v;
  };
  const std::string rank = get("RANK"), world = get("WORLD_SIZE"), local = get("LOCAL_RANK");
  const std::string addr = get("MASTER_ADDR"), port = get("MASTER_PORT");
  if (!missing.empty()) {
    std::string names;
    for (const auto& m : missing) names += (names.empty() ? "" : ", ") + m;
    throw UsageError("--distributed runs under torchrun, which sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and "
                     "MASTER_PORT; not set here: " + names +
                     ". Launch it as `torchrun --nproc-per-node 2 --no-python <tool> --distributed ...`");
  }
  RankEnvironment env;
  env.world_size = parse_int("WORLD_SIZE", world, 1, 1 << 20);
  if (env.world_size < 2) {
    throw UsageError("--distributed needs at least 2 ranks, but WORLD_SIZE is " + world +
                     " (torchrun --nproc-per-node 2 or more)");
  }
  env.rank = parse_int("RANK", rank, 0, env.world_size - 1);
  env.local_rank = parse_int("LOCAL_RANK", local, 0, env.world_size - 1);
  env.master_addr = addr;
  env.master_port = parse_int("MASTER_PORT", port, 1, 65535);
  const char* agent = getenv("TORCHELASTIC_USE_AGENT_STORE");
  env.agent_store = agent != nullptr && (std::string(agent) == "True" || std::string(agent) == "true" ||
                                         std::string(agent) == "1");
  const char* run_id = getenv("TORCHELASTIC_RUN_ID");
  env.run_id = run_id != nullptr && *run_id != '\0' ? run_id : "none";
  const char* restarts = getenv("TORCHELASTIC_RESTART_COUNT");
  env.restart_count = restarts != nullptr && *restarts != '\0' ? parse_int("TORCHELASTIC_RESTART_COUNT", restarts, 0, 1 << 30) : 0;
  return env;
}

}  // namespace xllm_kernel::tools::distributed
