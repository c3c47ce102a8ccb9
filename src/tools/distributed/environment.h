// torchrun's description of this process, read from its environment variables, for the tools'
// distributed runs (run.h).
//
//   const RankEnvironment env = rank_environment([](const char* name) { return std::getenv(name); });
#pragma once

#include <functional>
#include <string>

namespace xllm_kernel::tools::distributed {

struct RankEnvironment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr;
  int master_port = 0;
  bool agent_store = false;   // TORCHELASTIC_USE_AGENT_STORE=True: torchrun's agent hosts the store
  std::string run_id;         // TORCHELASTIC_RUN_ID ("none" for a static rendezvous)
  int restart_count = 0;      // TORCHELASTIC_RESTART_COUNT
};

// Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (and torchrun's optional
// TORCHELASTIC_* variables) through `getenv`. Throws UsageError naming what is missing or wrong,
// and when WORLD_SIZE < 2.
RankEnvironment rank_environment(const std::function<const char*(const char*)>& getenv);

}  // namespace xllm_kernel::tools::distributed
