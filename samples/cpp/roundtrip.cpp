// SPDX-License-Identifier: Apache-2.0
// Sample: the C ABI from C++, with RAII handles. Opens a pool in a temporary directory,
// registers a small paged KV cache in host memory, stores one prompt's KV, looks it up, loads
// it into other blocks layer by layer and checks every byte.
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "tutti.h"

namespace {

void check(int rc, const char* what) {
  if (rc != 0) throw std::runtime_error(std::string(what) + ": " + tutti_strerror(rc) + " (" + tutti_last_error() + ")");
}

struct RuntimeDeleter {
  void operator()(tutti_runtime* rt) const { tutti_runtime_close(rt); }
};
struct BatchDeleter {
  void operator()(tutti_batch* b) const { tutti_batch_destroy(b); }
};
using Runtime = std::unique_ptr<tutti_runtime, RuntimeDeleter>;
using Batch = std::unique_ptr<tutti_batch, BatchDeleter>;

Runtime open(const std::string& pool) {
  tutti_options* o = nullptr;
  check(tutti_options_create(&o), "options");
  std::unique_ptr<tutti_options, void (*)(tutti_options*)> opts(o, tutti_options_destroy);
  check(tutti_options_set(o, "pool", pool.c_str()), "pool");
  check(tutti_options_set(o, "capacity", "1G"), "capacity");
  tutti_runtime* rt = nullptr;
  check(tutti_runtime_open(o, &rt), "open");
  return Runtime(rt);
}

void run(tutti_runtime* rt, tutti_op op, const tutti_request& r, uint32_t layers) {
  tutti_batch* raw = nullptr;
  check(tutti_batch_create(rt, op, &raw), "batch");
  Batch b(raw);
  check(tutti_batch_add(b.get(), &r, 1), "add");
  check(tutti_batch_submit(b.get()), "submit");
  for (uint32_t l = 0; l < layers; ++l) check(tutti_batch_wait_layer(b.get(), l), "wait_layer");
  check(tutti_batch_wait(b.get()), "wait");
}

}  // namespace

int main() try {
  constexpr uint32_t kLayers = 4, kBlocks = 128, kBt = 16, kHeads = 8, kDim = 128, kTokens = 1024;
  char dir[] = "/tmp/tutti-sample-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  const std::string pool = std::string(dir) + "/kv.pool";

  const size_t layer_bytes = size_t{2} * kBlocks * kBt * kHeads * kDim * 2, block = size_t{kBt} * kHeads * kDim * 2;
  std::vector<unsigned char> kv(kLayers * layer_bytes);
  for (size_t i = 0; i < kv.size(); ++i) kv[i] = static_cast<unsigned char>(i * 2654435761u >> 13);
  std::vector<void*> bases;
  for (uint32_t l = 0; l < kLayers; ++l) bases.push_back(kv.data() + l * layer_bytes);
  std::vector<int32_t> tokens(kTokens), stored_in(kTokens / kBt), loaded_into(kTokens / kBt);
  for (uint32_t i = 0; i < kTokens; ++i) tokens[i] = static_cast<int32_t>(1000 + 7 * i);
  std::iota(stored_in.begin(), stored_in.end(), 0);
  std::iota(loaded_into.begin(), loaded_into.end(), static_cast<int32_t>(kTokens / kBt));

  int bad = 0;
  {
    Runtime rt = open(pool);
    tutti_kv_layout l;
    check(tutti_kv_layout_init(&l, kLayers, kBlocks, kBt, kHeads, kDim, 2, 0), "layout");
    l.k_base = bases.data();
    l.v_offset = uint64_t{kBlocks} * l.block_stride;
    check(tutti_runtime_register_kv(rt.get(), &l), "register");
    tutti_request r{};
    r.tokens = tokens.data(), r.num_tokens = kTokens, r.block_table = stored_in.data(), r.num_block_ids = stored_in.size();
    r.token_end = TUTTI_TOKENS_ALL;  // every whole chunk
    run(rt.get(), TUTTI_OP_STORE, r, kLayers);
    size_t hit = 0;
    check(tutti_lookup(rt.get(), tokens.data(), tokens.size(), nullptr, 0, &hit), "lookup");
    std::printf("stored %u tokens with backend %s; lookup finds %zu cached tokens\n", kTokens,
                tutti_runtime_backend(rt.get()), hit);
    r.block_table = loaded_into.data();
    run(rt.get(), TUTTI_OP_LOAD, r, kLayers);
    for (uint32_t layer = 0; layer < kLayers; ++layer)
      for (int side = 0; side < 2; ++side)
        for (size_t i = 0; i < stored_in.size(); ++i) {
          const unsigned char* base = kv.data() + layer * layer_bytes + side * (layer_bytes / 2);
          bad += std::memcmp(base + loaded_into[i] * block, base + stored_in[i] * block, block) != 0;
        }
    std::printf("loaded back into other blocks: %s\n", bad ? "BYTES DIFFER" : "every byte matches");
  }
  ::unlink(pool.c_str());
  ::rmdir(dir);
  return bad ? 1 : 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "sample: %s\n", e.what());
  return 1;
}
