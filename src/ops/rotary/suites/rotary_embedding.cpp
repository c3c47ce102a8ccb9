// rotary_embedding: query and key rotated in place (vLLM's semantics), against a float64 reference.
//
// Options: --tokens, --head-size, --rot (full: rot_dim = head_size; half: head_size / 2, partial
// rotary), --heads (query/key head counts, "32/8"; "8/0" passes no key), --is-neox, --dtype,
// --cache-dtype (float32 or input), --layout (contiguous; 3d [tokens, heads, head_size]; qkv:
// query and key slices of one fused [tokens, (q + 2 k) heads * head_size] tensor, the value part
// after them), --max-position (cache rows; positions are drawn uniformly below it). The default
// grid follows vLLM's and FlashInfer's tests (head sizes 64, 80, 96, 128, 256; partial and full
// rotary; GQA 32/8 and 8/1; NeoX and GPT-J; cache float32 and the input's dtype; contiguous and
// fused layouts), plus zero tokens, one token, no key, 3-D views and a longer sequence.
//
// The cases are not TensorCases: query and key of the qkv layout share one storage on the device,
// as they do in a model, and validation checks what TensorCase cannot express: every element
// outside the rotated ones (past rot_dim, the value part, padding) bitwise unchanged.
//
// Tolerance. An output element is x1 c - x2 s or x2 c + x1 s, where x1, x2, c, s are exact in
// float32 (inputs of the dtype, cache float32 or the dtype). In float32 each product is rounded
// (u32 = 2^-24 of it) or fused into the sum, and the sum is rounded (u32 of |x1 c| + |x2 s| at most,
// plus u32^2), so the float32 value is within 2 u32 m (1 + u32) of the exact one, m = |x1 c| + |x2 s|,
// whether an implementation uses fused multiply-adds (cpu.native, cuda.native) or not (the ATen
// composites). The tolerance doubles that: atol = 4 u32 m with m the largest of the case (absolute:
// the difference may cancel). The result is then rounded once to the dtype: at most u |result|
// (u = 2^-8 bfloat16, 2^-11 float16; none for float32), taken as rtol = 2 u as in the other suites
// (a rounding boundary may sit between the exact and the float32 value).
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "src/numerics/options.h"
#include "src/numerics/tensor_case.h"
#include "src/numerics/verify.h"
#include "src/ops/rotary/suites/reference.h"
#include "xllm_kernel/ops/rotary.h"

namespace xllm_kernel::numerics {
namespace {

// ---------------------------------------------------------------- parameters

struct HeadCounts {
  int64_t query = 0, key = 0;
};

HeadCounts parse_heads(const std::string& s) {
  const size_t slash = s.find('/');
  HeadCounts h;
  bool ok = slash != std::string::npos && slash > 0 && slash + 1 < s.size() &&
            s.find_first_not_of("0123456789/") == std::string::npos && s.find('/', slash + 1) == std::string::npos;
  if (ok) {
    h.query = std::stoll(s.substr(0, slash));
    h.key = std::stoll(s.substr(slash + 1));
    ok = h.query >= 1 && (h.key == 0 || h.query % h.key == 0);
  }
  if (!ok) {
    throw CLI::ValidationError("--heads", "expected QUERY/KEY head counts with QUERY >= 1 a multiple of KEY (KEY 0: "
                                          "no key), got '" + s + "'");
  }
  return h;
}

int64_t rot_dim_of(const json& p) {
  const int64_t head_size = p.at("head_size");
  if (p.at("rot") == "full") return head_size - head_size % 2;
  return std::max<int64_t>(2, head_size / 2 - (head_size / 2) % 2);
}

struct Built {
  at::Tensor positions, query, key, cache;  // CPU; key undefined: None
  int64_t head_size = 0, rot_dim = 0;
  HeadCounts heads;
  bool neox = true;
};

Built build(const json& p, at::Generator& g) {
  Built b;
  const int64_t tokens = p.at("tokens");
  b.head_size = p.at("head_size");
  b.rot_dim = rot_dim_of(p);
  b.heads = parse_heads(p.at("heads"));
  b.neox = p.at("is_neox") == "true";
  const at::ScalarType dtype = options::parse_dtype(p.at("dtype"));
  const at::ScalarType cache_dtype = p.at("cache_dtype") == "float32" ? at::kFloat : dtype;
  const int64_t max_position = p.at("max_position");
  const std::string layout = p.at("layout");
  const int64_t q = b.heads.query * b.head_size, k = b.heads.key * b.head_size;
  b.positions = at::randint(0, max_position, {tokens}, g, at::kLong);
  b.cache = rotary::cos_sin_cache(max_position, b.rot_dim, cache_dtype);
  if (layout == "qkv") {
    const at::Tensor qkv = at::randn({tokens, q + 2 * k}, g, at::kDouble).to(dtype);
    b.query = qkv.narrow(1, 0, q);
    if (k > 0) b.key = qkv.narrow(1, q, k);
  } else if (layout == "3d") {
    b.query = at::randn({tokens, b.heads.query, b.head_size}, g, at::kDouble).to(dtype);
    if (k > 0) b.key = at::randn({tokens, b.heads.key, b.head_size}, g, at::kDouble).to(dtype);
  } else {
    b.query = at::randn({tokens, q}, g, at::kDouble).to(dtype);
    if (k > 0) b.key = at::randn({tokens, k}, g, at::kDouble).to(dtype);
  }
  if (p.value("values", "finite") == "nonfinite") {
    // NaN and +-inf inside the rotated part (both elements of a pair) and past it.
    const double nan = std::nan(""), inf = INFINITY;
    at::Tensor qh = b.query.dim() == 3 ? b.query : b.query.unflatten(1, {b.heads.query, b.head_size});
    const std::tuple<int64_t, int64_t, int64_t, double> values[] = {
        {0, 0, 0, nan}, {1, 0, 1, inf}, {2, b.heads.query - 1, b.rot_dim - 1, -inf}, {3, 0, b.head_size - 1, nan},
        {4, 0, 0, inf}, {4, 0, b.neox ? b.rot_dim / 2 : 1, -inf}};
    for (const auto& [t, h, e, v] : values) {
      if (t < tokens) qh[t][h][e].fill_(v);
    }
    if (b.key.defined() && tokens > 1) {
      at::Tensor kh = b.key.dim() == 3 ? b.key : b.key.unflatten(1, {b.heads.key, b.head_size});
      kh[1][0][0].fill_(-inf);
      kh[tokens - 1][b.heads.key - 1][1].fill_(nan);
    }
  }
  return b;
}

// t as [tokens, heads, head_size] (same memory).
at::Tensor heads_view(const at::Tensor& t, int64_t heads, int64_t head_size) {
  return t.dim() == 3 ? t : t.unflatten(1, {heads, head_size});
}

// ---------------------------------------------------------------- the case

// Copies query and key (and their storage) to `device`, keeping one storage where they share one.
std::pair<at::Tensor, at::Tensor> to_device(const Built& b, const at::Device& device) {
  at::Tensor q = copy_with_layout(b.query, device), k;
  if (b.key.defined()) {
    k = b.key.is_alias_of(b.query) ? q.as_strided(b.key.sizes(), b.key.strides(), b.key.storage_offset())
                                   : copy_with_layout(b.key, device);
  }
  return {q, k};
}

struct State {
  Built built;
  at::Tensor positions, query, key, cache;           // on the device
  at::Tensor pristine_query, pristine_key;            // on the device: the values before any call
  at::Tensor pristine_positions, pristine_cache;      // likewise
  std::optional<at::Tensor> key_argument;
  at::Tensor want_query, want_key;                    // float64 [tokens, heads, head_size]
  Tolerance tolerance;
};

class RotaryCase final : public KernelCase {
 public:
  explicit RotaryCase(json parameters)
      : shape_(rotary_embedding_contract().operation, std::move(parameters), nullptr) {}
  std::string case_id() const override { return shape_.case_id(); }
  json parameters() const override { return shape_.parameters(); }
  std::optional<std::string> unsupported_reason(const Plan& plan) const override {
    return shape_.unsupported_reason(plan);
  }
  PreparedCase prepare(const Plan& plan) const override;

 private:
  TensorCase shape_;  // the case id and the graph-mode rules, shared with every tensor case
};

PreparedCase RotaryCase::prepare(const Plan& plan) const {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(plan.seed ^ std::hash<std::string>{}(case_id()));
  auto st = std::make_shared<State>();
  st->built = build(parameters(), generator);
  const Built& b = st->built;
  double max_terms = 0;
  st->want_query = rotary::reference_rotary_embedding(b.positions, b.query, b.head_size, b.cache, b.neox, max_terms);
  if (b.key.defined()) {
    st->want_key = rotary::reference_rotary_embedding(b.positions, b.key, b.head_size, b.cache, b.neox, max_terms);
  }
  const double u = unit_roundoff(b.query.scalar_type());
  st->tolerance = Tolerance{4 * std::ldexp(1.0, -24) * max_terms, 2 * u};

  const at::Device device = torch_device(plan);
  std::tie(st->query, st->key) = to_device(b, device);
  std::tie(st->pristine_query, st->pristine_key) = to_device(b, device);
  st->positions = copy_with_layout(b.positions, device);
  st->cache = copy_with_layout(b.cache, device);
  st->pristine_positions = copy_with_layout(b.positions, device);
  st->pristine_cache = copy_with_layout(b.cache, device);
  if (st->key.defined()) st->key_argument = st->key;
  const bool shared = st->key.defined() && b.key.is_alias_of(b.query);

  PreparedCase prepared;
  auto kernel = plan.kernel;
  prepared.function = [st, kernel] {
    const Built& b = st->built;
    kernel->function<RotaryEmbeddingFn>()(st->positions, st->query, st->key_argument, b.head_size, st->cache, b.neox);
  };
  prepared.held_bytes = storage_bytes({b.positions, b.query, b.key, b.cache, st->positions, st->query, st->key, st->cache,
                                        st->pristine_query, st->pristine_key, st->pristine_positions,
                                        st->pristine_cache, st->want_query, st->want_key});
  prepared.reset = [st] { restore({{st->query, st->pristine_query}, {st->key, st->pristine_key}}); };
  prepared.snapshot = [st] {
    std::vector<at::Tensor> out{st->query.clone()};
    if (st->key.defined()) out.push_back(st->key.clone());
    return out;
  };

  const int64_t tokens = b.positions.numel(), rotated = tokens * (b.heads.query + b.heads.key) * b.rot_dim;
  const int64_t es = b.query.element_size();
  // Bytes, as the performance targets count them: the rotated part of query and key read and
  // written, and one cache row (rot_dim elements) read per token; positions (8 bytes a token) are
  // not counted.
  prepared.metadata.bytes_read = rotated * es + tokens * b.rot_dim * b.cache.element_size();
  prepared.metadata.bytes_written = rotated * es;
  prepared.metadata.flops = 3.0 * static_cast<double>(rotated);

  prepared.validate = [st, shared] {
    const Built& b = st->built;
    Validation v;
    compare(v, "query", "mutation", heads_view(st->query, b.heads.query, b.head_size), st->want_query, st->tolerance);
    if (st->key.defined()) {
      compare(v, "key", "mutation", heads_view(st->key, b.heads.key, b.head_size), st->want_key, st->tolerance);
    }
    // Outside the rotated elements (past rot_dim, between heads and rows, the value part of a
    // fused qkv, the rest of the storage) every byte is as before.
    auto rotated_part = [&](const at::Tensor& storage, const at::Tensor& like, int64_t heads) {
      const at::Tensor h = heads_view(like, heads, b.head_size);
      return storage.as_strided(h.sizes(), h.strides(), h.storage_offset()).narrow(2, 0, b.rot_dim);
    };
    auto check_storage = [&](const std::string& name, bool with_query, bool with_key) {
      const at::Tensor now = whole_storage(with_query ? st->query : st->key).to(at::kCPU);
      at::Tensor want = whole_storage(with_query ? st->pristine_query : st->pristine_key).to(at::kCPU).clone();
      if (with_query) rotated_part(want, st->query, b.heads.query).copy_(rotated_part(now, st->query, b.heads.query));
      if (with_key) rotated_part(want, st->key, b.heads.key).copy_(rotated_part(now, st->key, b.heads.key));
      const bool same = bitwise_equal(now, want);
      v.checks.push_back({{"name", name}, {"kind", "unchanged_outside_rotation"}, {"passed", same}});
      if (!same) {
        v.passed = false;
        v.failures.push_back(name + ": elements outside the rotated ones (past rot_dim, between heads or rows, or "
                                    "elsewhere in the storage) changed");
      }
    };
    if (shared) {
      check_storage("query+key storage", true, true);
    } else {
      check_storage("query storage", true, false);
      if (st->key.defined()) check_storage("key storage", false, true);
    }
    for (const auto& [name, now, before] : {std::tuple<const char*, at::Tensor, at::Tensor>{
                                                "positions", st->positions, st->pristine_positions},
                                            {"cos_sin_cache", st->cache, st->pristine_cache}}) {
      const bool same = bitwise_equal(whole_storage(now), whole_storage(before));
      v.checks.push_back({{"name", name}, {"kind", "unchanged"}, {"passed", same}});
      if (!same) {
        v.passed = false;
        v.failures.push_back(std::string("input ") + name + " was modified, but the contract does not declare it mutated");
      }
    }
    return v;
  };
  return prepared;
}

// ---------------------------------------------------------------- options and grid

const char* const kGridOptions[] = {"tokens", "head-size", "rot", "heads", "is-neox",
                                    "dtype", "cache-dtype", "layout", "max-position"};

void add_arguments(CLI::App& app, SuiteOptions& o) {
  app.add_option("--tokens", o["tokens"], "Tokens (comma list; 0 allowed) [default: 7, and extra cases]")->delimiter(',');
  app.add_option("--head-size", o["head-size"], "Head sizes (comma list, >= 2) [default: 64,80,96,128,256]")
      ->delimiter(',');
  app.add_option("--rot", o["rot"], "Rotated part: full (rot_dim = head_size), half [default: both]")->delimiter(',');
  app.add_option("--heads", o["heads"], "Query/key head counts, e.g. 32/8; 8/0: no key [default: 32/8,8/1]")
      ->delimiter(',');
  app.add_option("--is-neox", o["is-neox"], "NeoX halves (true) or GPT-J pairs (false) [default: both]")
      ->delimiter(',');
  app.add_option("--dtype", o["dtype"], "Query/key dtypes: float32,bfloat16,float16 [default: all]")->delimiter(',');
  app.add_option("--cache-dtype", o["cache-dtype"], "cos_sin_cache dtype: float32,input [default: both]")
      ->delimiter(',');
  app.add_option("--layout", o["layout"], "contiguous, 3d or qkv (slices of a fused tensor) [default: contiguous,qkv]")
      ->delimiter(',');
  app.add_option("--max-position", o["max-position"], "cos_sin_cache rows (comma list, >= 1) [default: 1024]")
      ->delimiter(',');
}

std::vector<std::shared_ptr<const KernelCase>> cases(const SuiteOptions& o) {
  std::vector<Dimension> dims = {
      {"tokens", options::integers(o, "tokens", {7}, 0)},
      {"head_size", options::integers(o, "head-size", {64, 80, 96, 128, 256}, 2)},
      {"rot", options::choices(o, "rot", {"full", "half"}, {"half", "full"})},
      {"heads", {}},
      {"is_neox", options::choices(o, "is-neox", {"true", "false"}, {"true", "false"})},
      {"dtype", options::choices(o, "dtype", {"float32", "bfloat16", "float16"}, {"float32", "bfloat16", "float16"})},
      {"cache_dtype", options::choices(o, "cache-dtype", {"float32", "input"}, {"float32", "input"})},
      {"layout", options::choices(o, "layout", {"contiguous", "3d", "qkv"}, {"contiguous", "qkv"})},
      {"max_position", options::integers(o, "max-position", {1024}, 1)},
  };
  for (const auto& h : options::given(o, "heads") ? o.at("heads") : std::vector<std::string>{"32/8", "8/1"}) {
    parse_heads(h);
    dims[3].values.push_back(h);
  }
  for (const auto& d : dims[5].values) options::parse_dtype(d.get<std::string>());
  std::vector<std::shared_ptr<const KernelCase>> out;
  for (json p : cartesian(dims)) {
    // A float32 query's "input" cache is the float32 case again.
    if (p["dtype"] == "float32" && p["cache_dtype"] == "input" && dims[6].values.size() > 1) continue;
    out.push_back(std::make_shared<RotaryCase>(std::move(p)));
  }
  bool defaults = true;
  for (const char* key : kGridOptions) defaults &= !options::given(o, key);
  if (defaults) {
    auto point = [](int64_t tokens, int64_t head_size, const char* rot, const char* heads, const char* neox,
                    const char* dtype, const char* cache, const char* layout) {
      return json{{"tokens", tokens}, {"head_size", head_size}, {"rot", rot}, {"heads", heads}, {"is_neox", neox},
                  {"dtype", dtype},   {"cache_dtype", cache},   {"layout", layout}, {"max_position", 1024}};
    };
    std::vector<json> extra;
    for (const char* dtype : {"float32", "bfloat16", "float16"}) {
      extra.push_back(point(0, 128, "full", "32/8", "true", dtype, "float32", "contiguous"));  // zero tokens
    }
    for (const char* neox : {"true", "false"}) {
      extra.push_back(point(1, 128, "full", "32/8", neox, "bfloat16", "float32", "contiguous"));  // decode
      extra.push_back(point(300, 128, "full", "8/1", neox, "bfloat16", "float32", "qkv"));         // a prefill
      for (const char* rot : {"full", "half"}) {
        extra.push_back(point(7, 128, rot, "32/8", neox, "float16", "input", "3d"));
        extra.push_back(point(7, 64, rot, "8/0", neox, "bfloat16", "float32", "qkv"));  // no key
        extra.push_back(point(7, 96, rot, "8/0", neox, "float32", "float32", "3d"));
      }
    }
    for (const char* dtype : {"float32", "bfloat16", "float16"}) {  // non-finite query and key values
      for (const char* neox : {"true", "false"}) {
        json p = point(7, 128, "half", "32/8", neox, dtype, "float32", "qkv");
        p["values"] = "nonfinite";
        extra.push_back(p);
      }
    }
    for (json& p : extra) out.push_back(std::make_shared<RotaryCase>(std::move(p)));
  }
  return out;
}

// The rows the kernels walk (each head of each token) and their width: rot_dim / 2, the pairs
// they rotate.
RowShape row_shape(const json& p) {
  const HeadCounts heads = parse_heads(p.at("heads"));
  return {p.at("tokens").get<int64_t>() * (heads.query + heads.key), rot_dim_of(p) / 2};
}

}  // namespace

const OperationSuite& rotary_embedding_suite() {
  static const OperationSuite suite{
      .operation = rotary_embedding_contract().operation,
      .description = "Rotary position embedding of query and key in place (NeoX and GPT-J, partial rotary)",
      .add_arguments = add_arguments,
      .cases = cases,
      .has_reference = true,
      // The target shape: 32 query and 8 key heads of 128, bfloat16, float32 cache.
      .benchmark_defaults = {{"tokens", {"1", "128", "8192"}}, {"head-size", {"128"}}, {"rot", {"full"}},
                             {"heads", {"32/8"}}, {"is-neox", {"true"}}, {"dtype", {"bfloat16"}},
                             {"cache-dtype", {"float32"}}, {"layout", {"contiguous"}}},
      // A decode batch of 16 and a 512-token prefill chunk of the same heads.
      .headline = {{"tokens", {"16", "512"}}, {"head-size", {"128"}}, {"rot", {"full"}}, {"heads", {"32/8"}},
                   {"is-neox", {"true"}}, {"dtype", {"bfloat16"}}, {"cache-dtype", {"float32"}},
                   {"layout", {"contiguous"}}},
      .row_shape = row_shape,
      .accepted_bad_inputs = {
          {"positions", "non-contiguous last dimension", AcceptedAs::kSameResults,
           "positions are read through their stride"},
          {"cos_sin_cache", "dim 0 + 1", AcceptedAs::kValidPrefix,
           "max_position is the cache's length; one more position is unused"}}};
  return suite;
}

XLLM_REGISTER_SUITE(rotary_embedding_suite);

}  // namespace xllm_kernel::numerics
