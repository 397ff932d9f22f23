// SPDX-License-Identifier: Apache-2.0
// tutti: the command-line tool. `info` says what works here, `bench` measures store and
// layer-wise load of a synthetic KV cache against the raw device, `fsck` and `stats` inspect a
// pool. One file per subcommand; this one has the usage and picks the subcommand.
#include <cstdio>
#include <cstring>
#include <string>

#include "cli.hpp"
#include "common/error.hpp"
#include "tutti.h"

namespace tutti::cli {

namespace {

const char* kUsage =
    "usage: tutti <command> [options]\n"
    "\n"
    "commands:\n"
    "  info [--json]        version, build features, which backends work here (and why not), and\n"
    "                       each option's value here and where it comes from (default or TUTTI_*)\n"
    "  bench [options]      store a synthetic KV cache, load it back layer by layer, verify every\n"
    "                       byte, and compare with the raw bandwidth of the same pool file (the best\n"
    "                       of a sweep of threads, queue depth and I/O size, measured in every run).\n"
    "                       CPU columns, per layer: cpu = the calling (engine) thread, io cpu = the\n"
    "                       whole process, sched = tutti's scheduler, waker and copier threads, sqpoll =\n"
    "                       io_uring SQPOLL threads (gpu-uring), io-wq = io_uring's worker threads\n"
    "                       (the reads async_reads hands them: on zram or tmpfs, their copying)\n"
    "  fsck POOL... [--repair] [--json]\n"
    "                       check superblocks, commit records and every layer checksum;\n"
    "                       --repair clears every record that fails (its chunk becomes a miss);\n"
    "                       exit 0 consistent (or repaired), 4 damage found\n"
    "  stats POOL... [--prometheus | --json]\n"
    "                       occupancy, chunks and layout fingerprint of a pool\n"
    "                       (--prometheus: the occupancy as Prometheus gauges)\n"
    "  --version            the version\n"
    "\n"
    "--json: one JSON document (a \"schema\" number versions its fields); bench --json: one\n"
    "JSON object per row. A bad command line exits 2.\n"
    "\n"
    "bench options:\n"
    "  --model NAME         llama3-8b (default), llama3-70b, qwen2.5-7b, mistral-7b, tiny\n"
    "  --tokens N           prompt tokens to store and load (default 8192)\n"
    "  --requests N         split the tokens over N requests of one batch (default 1)\n"
    "  --pool URI           pool file to use; it is recreated for every run, so it must be absent,\n"
    "                       empty, or a pool no runtime holds (default ./tutti-bench.pool)\n"
    "  --backends LIST      comma-separated backends (default: every one that works here)\n"
    "  --no-baseline        skip the per-block baseline (one I/O per block and K/V)\n"
    "  --dram-tier SIZE     a DRAM tier of SIZE above the pool (option dram_tier); loads that it\n"
    "                       serves are memcpys, and tier_hit_ratio says how many\n"
    "  --direct MODE        auto | on | off: vectored I/O straight into the blocks (default auto)\n"
    "  --block-tokens N     tokens per KV block (default 16)\n"
    "  --chunk-tokens N     tokens per stored chunk (default 256)\n"
    "  --hnd                use the HND block layout (default NHD)\n"
    "  --memory KIND        host (default) or cuda: the KV cache in HBM of CUDA device 0\n"
    "  --repeat N           loads per run, each after a raw read; medians reported (default 3)\n"
    "  --json               one JSON object per line instead of a table\n"
    "  --keep               keep the pool file afterwards\n"
    "  --quiet              no progress output\n"
    "  --remote URI         measure a Redis Cluster (redis://host:port,...) with the shared tier's\n"
    "                       values instead: SET and GET of chunk-layers by 1, 2, 4 ... connections\n"
    "                       (--remote-connections N, default 4; --remote-depth N in flight each,\n"
    "                       default 8; --remote-timeout-ms MS, default 2000)\n"
    "\n"
    "Every runtime option of tutti.h can also be set with its TUTTI_* environment variable\n"
    "(TUTTI_RINGS, TUTTI_QUEUE_DEPTH, TUTTI_STAGING, TUTTI_LOOKAHEAD, TUTTI_THREADS, ...).\n";

}  // namespace

void print_usage(std::FILE* to) { std::fputs(kUsage, to); }

}  // namespace tutti::cli

int main(int argc, char** argv) {
  using namespace tutti::cli;
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "help")) {
    print_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  std::string cmd = argv[1];
  if (cmd == "--version" || cmd == "version") {
    std::printf("tutti %s\n", tutti_version_string());
    return 0;
  }
  const bool known = cmd == "info" || cmd == "bench" || cmd == "stats" || cmd == "fsck";
  for (int i = 2; known && i < argc; ++i)  // `tutti fsck --help`: the usage, which covers each command
    if (!std::strcmp(argv[i], "-h") || !std::strcmp(argv[i], "--help")) {
      print_usage(stdout);
      return 0;
    }
  try {
    if (cmd == "info") return cmd_info(argc - 2, argv + 2);
    if (cmd == "bench") return cmd_bench(argc - 2, argv + 2);
    if (cmd == "stats") return cmd_stats(argc - 2, argv + 2);
    if (cmd == "fsck") return cmd_fsck(argc - 2, argv + 2);
  } catch (const tutti::Error& e) {
    std::fprintf(stderr, "tutti %s: %s (%s)\n", cmd.c_str(), tutti::user_message(e).c_str(), tutti_strerror(e.code()));
    return 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "tutti %s: out of memory (%s)\n", cmd.c_str(), tutti_strerror(TUTTI_ENOMEM));
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tutti %s: %s (%s)\n", cmd.c_str(), e.what(), tutti_strerror(TUTTI_EINTERNAL));
    return 2;
  }
  std::fprintf(stderr, "tutti: unknown command '%s' (see tutti --help)\n", cmd.c_str());
  return 2;
}
