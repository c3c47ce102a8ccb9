// Suite of sample, token sampling from logits.
//
// Options: --batch, --vocab, --dtype, --dist, --shares, --sampling, --layout. With none given, the
// validation grid (below); the benchmark's default is its own grid (benchmark_defaults).
//
// A case is a batch of rows of one vocabulary. Logits: "normal1" N(0, 1), "normal5" N(0, 5), or
// "spikes" (N(0, 1/2) with five tokens per row raised to 8..12). Shares: "none"; "zeros" (30% of
// the logits 0: ties everywhere, at the top-k and top-p boundaries too); "neginf" (half of them -inf,
// and with 7 or more rows, row 1 all -inf but one token); "posinf" (up to three +inf tokens a row,
// and 10% -inf); "ties" (five tokens per row equal to the
// row's largest logit: greedy and top_k = 1 must take the lowest index). Sampling: "grid" (row r
// takes combination (r + case salt) of the parameter grid of FlashInfer's tests and more:
// temperature {0.7, 1.3} x top_k {off, 1, 10, 100, 500} x top_p {0.1, 0.5, 0.9, 1} x min_p {0,
// 0.05, 0.2}, plus greedy), "greedy" (temperature 0) or "typical" (temperature 0.8, top_k 50, top_p
// 0.9). Seeds and offsets are drawn per row (any int64). Layout: "contiguous", or "strided" (logits
// a slice of a [batch, vocab + 13] tensor, the per-row parameters every other element of a
// twice-as-long tensor).
//
// The validation grid: batch {1, 7, 64} x vocab {111, 32000} x dist x dtype, each with shares and
// layout drawn from a fixed seed; vocab 128256 and 151936 with batch 1 and 7 (and one batch-64 case
// each) over the dists; then each share with each sampling on a small case; and an empty batch.
//
// Reference: reference.h (float64, the kept set and the allowed tokens). The validation fails for
// any row whose token is not allowed; the checks record how many rows were exact (one allowed
// token) and how many had tokens within a rounding margin of a threshold.
//
// Bytes: the logits read (and the per-row parameters), the tokens written.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "src/numerics/options.h"
#include "src/numerics/tensor_case.h"
#include "src/numerics/verify.h"
#include "src/ops/sampling/suites/reference.h"
#include "xllm_kernel/ops/sampling.h"

namespace xllm_kernel::numerics {
namespace {

void add_arguments(CLI::App& app, SuiteOptions& o) {
  app.add_option("--batch", o["batch"], "Rows (comma list, >= 0) [default: 1,7,64 and 0]")->delimiter(',');
  app.add_option("--vocab", o["vocab"], "Vocabulary sizes (comma list, >= 1) [default: 111,32000 and 128256,151936]")
      ->delimiter(',');
  app.add_option("--dtype", o["dtype"], "Logits dtypes: float32,bfloat16,float16 [default: all]")->delimiter(',');
  app.add_option("--dist", o["dist"], "Logit distributions: normal1,normal5,spikes [default: all]")->delimiter(',');
  app.add_option("--shares", o["shares"], "Special logits: none,zeros,neginf,posinf,ties [default: drawn per case]")
      ->delimiter(',');
  app.add_option("--sampling", o["sampling"],
                 "Per-row parameters: grid (the parameter grid over the rows), greedy, typical (temperature 0.8, "
                 "top_k 50, top_p 0.9) [default: grid; the benchmark's: typical,greedy]")
      ->delimiter(',');
  app.add_option("--layout", o["layout"], "Layouts: contiguous,strided [default: drawn per case]")->delimiter(',');
}

struct Combination {
  float temperature = 0;
  int32_t top_k = 0;
  float top_p = 1;
  float min_p = 0;
};

// The parameter grid: greedy first, then temperature x top_k x top_p x min_p.
const std::vector<Combination>& grid() {
  static const std::vector<Combination> g = [] {
    std::vector<Combination> out{{0.0f, 0, 1.0f, 0.0f}};
    for (const float t : {0.7f, 1.3f}) {
      for (const int32_t k : {0, 1, 10, 100, 500}) {
        for (const float p : {0.1f, 0.5f, 0.9f, 1.0f}) {
          for (const float m : {0.0f, 0.05f, 0.2f}) out.push_back({t, k, p, m});
        }
      }
    }
    return out;
  }();
  return g;
}

Combination combination(const std::string& sampling, int64_t row, int64_t salt) {
  if (sampling == "greedy") return {0.0f, 0, 1.0f, 0.0f};
  if (sampling == "typical") return {0.8f, 50, 0.9f, 0.0f};
  const auto& g = grid();
  return g[static_cast<size_t>((row + salt) % static_cast<int64_t>(g.size()))];
}

// The logits in float32 before the dtype's rounding.
at::Tensor draw_logits(const json& p, int64_t batch, int64_t vocab, at::Generator& gen) {
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  const std::string dist = p.at("dist"), shares = p.at("shares");
  at::Tensor l = at::randn({batch, vocab}, gen, f32);
  if (dist == "normal5") l.mul_(5);
  if (batch == 0) return l;
  auto random_tokens = [&](int64_t count) {  // [batch, count] token indices
    return at::randint(vocab, {batch, count}, gen, at::TensorOptions().dtype(at::kLong));
  };
  if (dist == "spikes") {
    l.mul_(0.5);
    const int64_t n = std::min<int64_t>(5, vocab);
    l.scatter_(1, random_tokens(n), at::rand({batch, n}, gen, f32).mul_(4).add_(8));
  }
  if (shares == "zeros") {
    l.masked_fill_(at::rand({batch, vocab}, gen, f32).lt(0.3), 0.0);
  } else if (shares == "neginf") {
    l.masked_fill_(at::rand({batch, vocab}, gen, f32).lt(0.5), -std::numeric_limits<float>::infinity());
    // Every row keeps one finite logit; with 7 rows or more, row 1 has exactly one.
    const at::Tensor keep = random_tokens(1);
    l.scatter_(1, keep, at::randn({batch, 1}, gen, f32));
    if (batch >= 7) {
      const int64_t t = keep[1][0].item<int64_t>();
      const float v = l[1][t].item<float>();
      l[1].fill_(-std::numeric_limits<float>::infinity());
      l[1][t] = v;
    }
  } else if (shares == "posinf") {
    // Up to three +inf tokens a row (the contract: the draw is among them, each as likely; greedy
    // and top_k = 1 take the lowest index), and some -inf.
    l.masked_fill_(at::rand({batch, vocab}, gen, f32).lt(0.1), -std::numeric_limits<float>::infinity());
    l.scatter_(1, random_tokens(std::min<int64_t>(3, vocab)), std::numeric_limits<float>::infinity());
  } else if (shares == "ties") {
    const int64_t n = std::min<int64_t>(5, vocab);
    const at::Tensor top = std::get<0>(l.max(1, /*keepdim=*/true));
    l.scatter_(1, random_tokens(n), top.expand({batch, n}).contiguous());
  }
  return l;
}

Example build(const json& p, at::Generator& gen) {
  const int64_t batch = p.at("batch"), vocab = p.at("vocab");
  const at::ScalarType dtype = options::parse_dtype(p.at("dtype").get<std::string>());
  const std::string sampling = p.at("sampling"), layout = p.at("layout");
  const bool strided = layout == "strided";
  const at::Tensor l32 = draw_logits(p, batch, vocab, gen);
  at::Tensor logits;
  if (strided) {
    logits = at::empty({batch, vocab + 13}, at::TensorOptions().dtype(dtype)).narrow(1, 0, vocab);
    logits.copy_(l32);
  } else {
    logits = l32.to(dtype);
  }
  const int64_t salt = at::randint(1 << 20, {1}, gen, at::TensorOptions().dtype(at::kLong)).item<int64_t>();
  std::vector<float> t(batch), tp(batch), mp(batch);
  std::vector<int32_t> k(batch);
  for (int64_t r = 0; r < batch; ++r) {
    const Combination c = combination(sampling, r, salt);
    t[r] = c.temperature;
    k[r] = c.top_k;
    tp[r] = c.top_p;
    mp[r] = c.min_p;
  }
  // Seeds over all of int64 (negative ones too), offsets like an engine's step counters.
  const auto i64 = at::TensorOptions().dtype(at::kLong);
  const at::Tensor seeds_c = at::randint(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
                                         {batch}, gen, i64);
  const at::Tensor offsets_c = at::randint(0, int64_t{1} << 40, {batch}, gen, i64);
  // A per-row parameter, as its own tensor or every other element of a longer one.
  auto row = [&](const at::Tensor& values) {
    if (!strided) return values;
    at::Tensor wide = at::zeros({2 * batch}, values.options());
    at::Tensor view = wide.slice(0, 0, 2 * batch, 2);
    view.copy_(values);
    return view;
  };
  const at::Tensor temperature = row(at::tensor(t, at::TensorOptions().dtype(at::kFloat)).reshape({batch}));
  const at::Tensor top_k = row(at::tensor(k, at::TensorOptions().dtype(at::kInt)).reshape({batch}));
  const at::Tensor top_p = row(at::tensor(tp, at::TensorOptions().dtype(at::kFloat)).reshape({batch}));
  const at::Tensor min_p = row(at::tensor(mp, at::TensorOptions().dtype(at::kFloat)).reshape({batch}));
  const at::Tensor seeds = row(seeds_c), offsets = row(offsets_c);

  Example ex;
  ex.names = {"logits", "temperature", "top_k", "top_p", "min_p", "seeds", "offsets"};
  ex.tensors = {logits, temperature, top_k, top_p, min_p, seeds, offsets};
  ex.mutates = sample_contract().mutates;
  ex.call = [](const PreparedKernel& kernel, std::vector<at::Tensor>& a) {
    return std::vector<at::Tensor>{kernel.function<SampleFn>()(a[0], a[1], a[2], a[3], a[4], a[5], a[6])};
  };
  ex.reference = [](const std::vector<at::Tensor>& a) {
    auto rows = std::make_shared<std::vector<sampling::ReferenceRow>>(
        sampling::reference_sample(a[0], a[1], a[2], a[3], a[4], a[5], a[6]));
    Expected e;
    e.check_outputs = [rows](Validation& v, const std::vector<at::Tensor>& returned) {
      int64_t exact = 0, margin = 0, wrong = 0;
      if (returned.size() != 1 || returned[0].scalar_type() != at::kLong || returned[0].dim() != 1 ||
          returned[0].size(0) != static_cast<int64_t>(rows->size())) {
        v.passed = false;
        v.failures.push_back("expected one int64 [batch] tensor of tokens");
        return;
      }
      const at::Tensor got = returned[0].to(at::kCPU);
      for (size_t r = 0; r < rows->size(); ++r) {
        const auto& row = (*rows)[r];
        const int64_t token = got[static_cast<int64_t>(r)].item<int64_t>();
        exact += row.exact ? 1 : 0;
        margin += row.maybe_kept > 0 || !row.exact ? 1 : 0;
        if (!std::binary_search(row.allowed.begin(), row.allowed.end(), token)) {
          ++wrong;
          if (v.failures.size() < 8) {
            std::string allowed;
            for (size_t i = 0; i < row.allowed.size() && i < 8; ++i) allowed += (i ? ", " : "") + std::to_string(row.allowed[i]);
            v.failures.push_back("row " + std::to_string(r) + ": token " + std::to_string(token) + ", allowed {" +
                                 allowed + (row.allowed.size() > 8 ? ", ..." : "") + "} (" +
                                 std::to_string(row.sure_kept) + " kept, " + std::to_string(row.maybe_kept) +
                                 " within a margin)");
          }
        }
      }
      v.mismatches += wrong;
      if (wrong > 0) v.passed = false;
      v.checks.push_back({{"name", "out0"},
                          {"kind", "allowed tokens"},
                          {"passed", wrong == 0},
                          {"rows", rows->size()},
                          {"exact_rows", exact},
                          {"rows_with_margin", margin},
                          {"wrong_rows", wrong}});
    };
    return e;
  };
  const int64_t es = at::elementSize(dtype);
  ex.metadata = {batch * vocab * es + batch * 32, batch * 8, 0, {}};
  return ex;
}

// Positional on purpose: callers pass pick() draws as arguments, which the compiler evaluates in its
// own order (GCC: right to left); a braced initializer would draw them left to right and change the
// validation grid's cases.
json point(int64_t batch, int64_t vocab, const std::string& dtype, const std::string& dist, const std::string& shares,
           const std::string& sampling, const std::string& layout) {
  return {{"batch", batch},       {"vocab", vocab},       {"dtype", dtype},  {"dist", dist},
          {"shares", shares},     {"sampling", sampling}, {"layout", layout}};
}

std::vector<std::shared_ptr<const KernelCase>> cases(const SuiteOptions& o) {
  const auto batches = options::integers(o, "batch", {1, 7, 64}, 0);
  const auto vocabs = options::integers(o, "vocab", {111, 32000}, 1);
  const auto dtypes = options::choices(o, "dtype", {"float32", "bfloat16", "float16"}, {"float32", "bfloat16", "float16"});
  const auto dists = options::choices(o, "dist", {"normal1", "normal5", "spikes"}, {"normal1", "normal5", "spikes"});
  const auto shares = options::choices(o, "shares", {"none", "zeros", "neginf", "posinf", "ties"},
                                           {"none", "zeros", "neginf", "posinf", "ties"});
  const auto samplings = options::choices(o, "sampling", {"grid", "greedy", "typical"}, {"grid"});
  const auto layouts = options::choices(o, "layout", {"contiguous", "strided"}, {"contiguous", "strided"});
  const bool grid_given = options::given(o, "batch") || options::given(o, "vocab") || options::given(o, "shares") ||
                          options::given(o, "layout");
  std::vector<json> points;
  if (grid_given) {
    points = cartesian({{"batch", batches},
                        {"vocab", vocabs},
                        {"dtype", dtypes},
                        {"dist", dists},
                        {"shares", shares},
                        {"sampling", samplings},
                        {"layout", layouts}});
  } else {
    // The first case is small and general (the bad-input test starts from it).
    points.push_back(point(7, 111, "float32", "normal1", "ties", "grid", "contiguous"));
    std::mt19937 rng(20261201);
    auto pick = [&](const std::vector<json>& values) { return values[rng() % values.size()]; };
    for (const json& p : cartesian({{"batch", batches}, {"vocab", vocabs}, {"dtype", dtypes}, {"dist", dists}})) {
      for (const json& s : samplings) {
        json q = p;
        q["sampling"] = s;
        q["shares"] = pick(shares);
        q["layout"] = pick(layouts);
        points.push_back(q);
      }
    }
    // The large vocabularies of Llama 3 and Qwen 2.
    if (!options::given(o, "vocab") && !options::given(o, "batch")) {
      for (const int64_t vocab : {128256, 151936}) {
        for (const json& dist : dists) {
          for (const int64_t batch : {1, 7}) {
            points.push_back(point(batch, vocab, pick(dtypes), dist, pick(shares), samplings.front(), pick(layouts)));
          }
        }
        points.push_back(point(64, vocab, dtypes.front(), "normal1", "none", samplings.front(), "contiguous"));
      }
    }
    // Each share with each sampling, small.
    for (const json& s : shares) {
      for (const std::string sampling : {"grid", "greedy", "typical"}) {
        points.push_back(point(64, 1000, pick(dtypes), pick(dists), s, sampling, pick(layouts)));
      }
    }
    // An empty batch.
    for (const json& dtype : dtypes) points.push_back(point(0, 111, dtype, "normal1", "none", "grid", "contiguous"));
  }
  std::vector<std::shared_ptr<const KernelCase>> out;
  for (const json& p : points) out.push_back(std::make_shared<TensorCase>(sample_contract().operation, p, build));
  return out;
}

// The timing cases: batch {1, 16, 64, 256} x vocab {32000, 128256}, float32 logits, the typical
// parameters and greedy.
SuiteOptions benchmark_defaults() {
  return {{"batch", {"1", "16", "64", "256"}},
          {"vocab", {"32000", "128256"}},
          {"dtype", {"float32"}},
          {"dist", {"normal1"}},
          {"shares", {"none"}},
          {"sampling", {"typical", "greedy"}},
          {"layout", {"contiguous"}}};
}

// The headline cases: a decode batch of 16 over Llama-3's vocabulary, typical parameters and greedy.
SuiteOptions headline() {
  return {{"batch", {"16"}},    {"vocab", {"128256"}},        {"dtype", {"float32"}}, {"dist", {"normal1"}},
          {"shares", {"none"}}, {"sampling", {"typical", "greedy"}}, {"layout", {"contiguous"}}};
}

RowShape row_shape(const json& p) { return {p.at("batch").get<int64_t>(), p.at("vocab").get<int64_t>()}; }

}  // namespace

const OperationSuite& sample_suite() {
  static const OperationSuite suite{
      .operation = sample_contract().operation,
      .description = "Token sampling from logits: greedy, temperature, top-k, top-p, min-p, Philox exponential race",
      .add_arguments = add_arguments,
      .cases = cases,
      .has_reference = true,
      .benchmark_defaults = benchmark_defaults(),
      .headline = headline(),
      .row_shape = row_shape,
      .accepted_bad_inputs = {
          {.argument = "logits",
           .variant = "dim 1 + 1",
           .as = AcceptedAs::kAnotherValidCall,
           .why = "one more token is another vocabulary, any vocab >= 1 is valid"},
          {.argument = "temperature",
           .variant = "non-contiguous last dimension",
           .as = AcceptedAs::kSameResults,
           .why = "the per-row parameters may have any stride"},
          {.argument = "top_k",
           .variant = "non-contiguous last dimension",
           .as = AcceptedAs::kSameResults,
           .why = "the per-row parameters may have any stride"},
          {.argument = "top_p",
           .variant = "non-contiguous last dimension",
           .as = AcceptedAs::kSameResults,
           .why = "the per-row parameters may have any stride"},
          {.argument = "min_p",
           .variant = "non-contiguous last dimension",
           .as = AcceptedAs::kSameResults,
           .why = "the per-row parameters may have any stride"},
          {.argument = "seeds",
           .variant = "non-contiguous last dimension",
           .as = AcceptedAs::kSameResults,
           .why = "the per-row parameters may have any stride"},
          {.argument = "offsets",
           .variant = "non-contiguous last dimension",
           .as = AcceptedAs::kSameResults,
           .why = "the per-row parameters may have any stride"},
      }};
  return suite;
}

XLLM_REGISTER_SUITE(sample_suite);

}  // namespace xllm_kernel::numerics
