// The batches of the attention suites (paged_attention.cpp, paged_attention_quant.cpp): the heads
// option, the sequences of a case's json point, their pages in a shuffled cache, the reference's
// work, the tolerance and the rows the kernels write. Both suites build their cases from these, so
// a plain and a quantized case of one point have the same sequences, tables and tolerance.
#pragma once

#include <ATen/ATen.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "src/numerics/suite.h"
#include "src/numerics/verify.h"

namespace xllm_kernel::numerics::paged_batches {

struct Heads {
  int64_t q = 0, kv = 0;
};

// "QxKV" with Q a multiple of KV, both >= 1; else the --heads error.
inline Heads parse_heads(const std::string& text) {
  const size_t x = text.find('x');
  try {
    if (x != std::string::npos) {
      const Heads h{std::stoll(text.substr(0, x)), std::stoll(text.substr(x + 1))};
      if (h.q >= 1 && h.kv >= 1 && h.q % h.kv == 0) return h;
    }
  } catch (const std::exception&) {
  }
  throw CLI::ValidationError("--heads", "'" + text + "' is not QxKV with Q a multiple of KV, both >= 1 (e.g. 32x8)");
}

// The --heads values given (each checked), else `defaults`.
inline std::vector<json> heads_values(const SuiteOptions& o, const std::vector<std::string>& defaults) {
  std::vector<json> out;
  const auto it = o.find("heads");
  const std::vector<std::string>& given = it == o.end() || it->second.empty() ? defaults : it->second;
  for (const auto& text : given) {
    parse_heads(text);
    out.push_back(text);
  }
  return out;
}

// One sequence of a batch.
struct Sequence {
  int64_t len = 0;    // context, its query rows included
  int64_t q_len = 0;  // query rows
};

struct Batch {
  std::vector<Sequence> seqs;
  int64_t padding_rows = 0;  // query rows after the last sequence's
};

inline int64_t chunk_of(const json& p) {
  const int64_t chunk = p.at("chunk");
  return chunk > 0 ? chunk : std::max<int64_t>(1, (p.at("context").get<int64_t>() + 1) / 2);
}

// `seqs` sequences of context `context` ("equal") or from context down to about half of it
// ("varied": sequence s has context - (s * 7919) % ceil(context / 2); with 7 or more sequences,
// sequence 3 is padding, seq_lens 0 and no query rows, and two padding rows follow). Kinds: decode
// (one query row a sequence), prefill (every position), chunked (the last `chunk` positions), mixed
// (sequence 0 a chunk, the others decodes). A point with "empty": one padding sequence.
inline Batch batch_of(const json& p) {
  const int64_t n = p.at("seqs"), context = p.at("context");
  const std::string mode = p.at("batch"), lengths = p.at("lengths");
  const int64_t chunk = chunk_of(p);
  Batch b;
  if (p.contains("empty")) {
    b.seqs.emplace_back();
    return b;
  }
  for (int64_t s = 0; s < n; ++s) {
    Sequence q;
    q.len = lengths == "equal" ? context : context - (s * 7919) % std::max<int64_t>(1, (context + 1) / 2);
    if (mode == "decode") q.q_len = 1;
    if (mode == "prefill") q.q_len = q.len;
    if (mode == "chunked") q.q_len = std::min(q.len, chunk);
    if (mode == "mixed") q.q_len = s == 0 ? std::min(q.len, chunk) : 1;
    if (lengths == "varied" && n >= 7 && s == 3) q = {};  // padding sequence
    b.seqs.push_back(q);
  }
  if (lengths == "varied" && n >= 7) b.padding_rows = 2;
  return b;
}

// First key a sequence's rows read (its first row's window start).
inline int64_t first_key(const Sequence& q, int64_t window) {
  return window > 0 ? std::max<int64_t>(0, q.len - q.q_len - window + 1) : 0;
}

// Multiply-adds of the reference (and of the attention): every query row's visible keys, both
// products, every head.
inline double work_of(const json& p) {
  const Heads h = parse_heads(p.at("heads"));
  const int64_t window = p.at("window"), head_size = p.at("head_size");
  double keys = 0;
  for (const Sequence& q : batch_of(p).seqs) {
    for (int64_t i = 0; i < q.q_len; ++i) {
      const int64_t pos = q.len - q.q_len + i;
      keys += static_cast<double>(window > 0 ? std::min(pos + 1, window) : pos + 1);
    }
  }
  return 2 * keys * static_cast<double>(h.q * head_size);
}

// Cache blocks a batch's caches hold: each sequence's, and three spares.
inline int64_t cache_blocks(const Batch& batch, int64_t block) {
  int64_t blocks = 3;
  for (const Sequence& q : batch.seqs) blocks += (q.len + block - 1) / block;
  return blocks;
}

// A batch laid out in a cache of `block`-row blocks: each sequence's blocks from a shuffled list
// (one randperm of the generator), each table row one column wider than its longest sequence
// needs, that column pointing at one of three spare blocks.
struct Pages {
  int64_t num_blocks = 0;
  int64_t width = 0;   // block table columns
  int64_t tokens = 0;  // query rows, the padding rows included
  std::vector<int32_t> table, qsl, lens;  // [seqs, width], [seqs + 1], [seqs]
  at::Tensor block_tables, query_start_loc, seq_lens;
  at::Tensor unowned;  // bool [num_blocks, block, 1, 1]: the cache rows no sequence owns
};

inline Pages lay_out(const Batch& batch, int64_t block, at::Generator& g) {
  const int64_t n = static_cast<int64_t>(batch.seqs.size());
  int64_t used = 0, widest = 0;
  for (const Sequence& q : batch.seqs) {
    const int64_t need = (q.len + block - 1) / block;
    used += need;
    widest = std::max(widest, need);
  }
  Pages pg;
  pg.num_blocks = used + 3;
  const at::Tensor order = at::randperm(pg.num_blocks, g, at::kLong);
  const int64_t* ids = order.const_data_ptr<int64_t>();
  pg.width = widest + 1;
  pg.table.resize(n * pg.width);
  pg.qsl.resize(n + 1);
  pg.lens.resize(n);
  std::vector<uint8_t> owned(pg.num_blocks * block, 0);
  int64_t next = 0, rows = 0;
  for (int64_t s = 0; s < n; ++s) {
    const Sequence& q = batch.seqs[s];
    const int64_t need = (q.len + block - 1) / block;
    for (int64_t b = 0; b < pg.width; ++b) {
      const int64_t spare = ids[used + (s + b) % 3];
      pg.table[s * pg.width + b] = static_cast<int32_t>(b < need ? ids[next + b] : spare);
    }
    for (int64_t b = 0; b < need; ++b) {
      const int64_t id = ids[next + b];
      std::fill_n(owned.begin() + id * block, std::min(block, q.len - b * block), 1);
    }
    next += need;
    pg.qsl[s] = static_cast<int32_t>(rows);
    pg.lens[s] = static_cast<int32_t>(q.len);
    rows += q.q_len;
  }
  pg.qsl[n] = static_cast<int32_t>(rows);
  pg.tokens = rows + batch.padding_rows;
  pg.block_tables = at::tensor(pg.table, at::kInt).view({n, pg.width});
  pg.query_start_loc = at::tensor(pg.qsl, at::kInt);
  pg.seq_lens = at::tensor(pg.lens, at::kInt);
  pg.unowned = at::tensor(owned, at::kByte).eq(0).view({pg.num_blocks, block, 1, 1});
  return pg;
}

// What the sequences with query rows read: the most keys one sequence reads, and the KV rows of all.
struct Reads {
  int64_t keys = 1;
  int64_t kv_rows = 0;
};

inline Reads reads_of(const Batch& batch, int64_t window) {
  Reads r;
  for (const Sequence& q : batch.seqs) {
    if (q.q_len == 0) continue;
    r.keys = std::max(r.keys, q.len - first_key(q, window));
    r.kv_rows += q.len - first_key(q, window);
  }
  return r;
}

// The implementations accumulate in float32 and round once: accumulate_tolerance over keys +
// head_size, raised to at least 4 unit roundoffs for the half types (torch's SDPA, the peer, rounds
// the softmax weights to the dtype before multiplying by V).
inline Tolerance attention_tolerance(at::ScalarType dtype, int64_t keys, int64_t head_size) {
  Tolerance tol = accumulate_tolerance(dtype, keys + head_size);
  if (dtype != at::kFloat) {
    const double floor = 4 * unit_roundoff(dtype);
    tol = {std::max(tol.atol, floor), std::max(tol.rtol, floor)};
  }
  return tol;
}

// The rows the kernels write (each head of each query row) and their width (head_size).
inline RowShape row_shape(const json& p) {
  const Batch b = batch_of(p);
  int64_t rows = b.padding_rows;
  for (const Sequence& q : b.seqs) rows += q.q_len;
  return {rows * parse_heads(p.at("heads")).q, p.at("head_size").get<int64_t>()};
}

}  // namespace xllm_kernel::numerics::paged_batches
