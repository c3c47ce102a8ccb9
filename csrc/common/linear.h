// Torch-free description of the linear family's packed weights, shared by every implementation's
// bridges and the CPU kernels: the schemes, the packed tensor's header and the sizes of its sections.
//
// A packed weight is a uint8 tensor [N, row_bytes]: its first kHeaderBytes hold a LinearHeader,
// then come the implementation's sections, each starting at a multiple of kSectionAlign bytes:
//   weights   at most padded_n * ceil(K * bits / 8) bytes (bits: 32 f32, 16 bf16/f16, 8 int8/fp8, 4 int4)
//   scales    float32, at most padded_n * groups entries (int8, fp8, int4)
//   zeros     float32, at most padded_n * groups entries (int4, w4a8)
//   sums      int32, at most padded_n * groups entries (w8a8-int8, w4a8: sum_k q over each group, what
//             an activation zero point, or a kernel's unsigned shift, subtracts)
// The activation-quantized schemes (w8a8-int8, w8a8-fp8, w4a8: the weights scaled_mm takes) size their
// weights for K padded: w8a8 ceil(K / 4) * 4 bytes per channel, w4a8 K / 2 (its groups are multiples of
// 8). Their sums section's offset is not in the header: linear_sizes gives it.
// padded_n is N rounded up to kPanel. The total (and so the tensor's shape) follows from the scheme,
// N, K and the group layout alone, the same for every implementation: a fake (Meta) kernel gives the
// exact shape, and torch.compile sees N as the packed tensor's first dimension.
#pragma once

#include <cstdint>
#include <cstring>

namespace xllm_kernel::kernels {

enum class LinearScheme : int32_t {
  kFloat32 = 0,
  kBFloat16 = 1,
  kFloat16 = 2,
  kInt8 = 3,
  kFp8 = 4,
  kInt4 = 5,
  // For scaled_mm (activations quantized per token): int8 per channel, symmetric in [-127, 127];
  // e4m3fn per tensor, channel or 128 x 128 block; int4 in groups of a multiple of 8.
  kW8A8Int8 = 6,
  kW8A8Fp8 = 7,
  kW4A8 = 8,
};

inline constexpr LinearScheme kAllLinearSchemes[] = {
    LinearScheme::kFloat32, LinearScheme::kBFloat16, LinearScheme::kFloat16, LinearScheme::kInt8,   LinearScheme::kFp8,
    LinearScheme::kInt4,    LinearScheme::kW8A8Int8, LinearScheme::kW8A8Fp8, LinearScheme::kW4A8};

constexpr const char* scheme_name(LinearScheme s) {
  switch (s) {
    case LinearScheme::kFloat32: return "f32";
    case LinearScheme::kBFloat16: return "bf16";
    case LinearScheme::kFloat16: return "f16";
    case LinearScheme::kInt8: return "int8";
    case LinearScheme::kFp8: return "fp8";
    case LinearScheme::kInt4: return "int4";
    case LinearScheme::kW8A8Int8: return "w8a8-int8";
    case LinearScheme::kW8A8Fp8: return "w8a8-fp8";
    case LinearScheme::kW4A8: return "w4a8";
  }
  return "?";
}

// Bits per stored weight.
constexpr int scheme_bits(LinearScheme s) {
  switch (s) {
    case LinearScheme::kFloat32: return 32;
    case LinearScheme::kBFloat16:
    case LinearScheme::kFloat16: return 16;
    case LinearScheme::kInt8:
    case LinearScheme::kFp8:
    case LinearScheme::kW8A8Int8:
    case LinearScheme::kW8A8Fp8: return 8;
    case LinearScheme::kInt4:
    case LinearScheme::kW4A8: return 4;
  }
  return 0;
}

constexpr bool scheme_has_scales(LinearScheme s) { return s != LinearScheme::kFloat32 && s != LinearScheme::kBFloat16 && s != LinearScheme::kFloat16; }

// The schemes scaled_mm takes (linear takes the others).
constexpr bool scheme_quantizes_activations(LinearScheme s) {
  return s == LinearScheme::kW8A8Int8 || s == LinearScheme::kW8A8Fp8 || s == LinearScheme::kW4A8;
}

// The int32 sums section (w8a8-int8, w4a8).
constexpr bool scheme_has_sums(LinearScheme s) { return s == LinearScheme::kW8A8Int8 || s == LinearScheme::kW4A8; }

// scaled_mm's K bound: every int32 sum of products (an int8 activation, or its difference with a
// zero point, times a weight) and every kernel's partial sum stays below 2^31 for K <= this.
inline constexpr int64_t kScaledMmMaxK = 65535;

// How fp8 scales were given (the packed form always keeps one float32 scale per output channel and
// K group).
enum class Fp8Scales : int32_t { kNone = 0, kTensor = 1, kChannel = 2, kBlock = 3 };
inline constexpr int64_t kFp8Block = 128;  // fp8 block scales: one per 128 x 128 block of W

// Layouts of the sections (what the packing implementation chose).
enum class LinearLayout : int32_t {
  kRows = 0,    // weights [N][K] as given (int4, w4a8: two K-neighbours per byte, low nibble first,
                // each stored as q + 8 without zeros), scales and zeros [N][groups], sums [N][groups]
  kPanels = 1,  // panels of kPanel output channels: weights [padded_n / kPanel][K][kPanel] (int4:
                // [K][kPanel / 2] bytes, byte i holds lane i in its low and lane i + kPanel / 2 in its
                // high nibble, as q + 8 without zeros), scales and zeros [panels][groups][kPanel]
  kQuads = 2,   // scaled_mm's native CPU layout (csrc/cpu/linear/scaled_mm.h): panels of kPanel
                // channels holding 4 (w8a8) or 8 (w4a8) consecutive k of a channel per 4 bytes
  kPanelPairs = 3,  // bf16 with K even, in the native CPU packing: panels of kPanel channels holding k
                    // and k + 1 of a channel per 4 bytes, weights [padded_n / kPanel][K / 2][kPanel][2]
                    // (the operand layout of vdpbf16ps and of oneDNN's bf16 brgemm, "VNNI-2"); scales
                    // and zeros: none
};

inline constexpr int64_t kPanel = 32;
inline constexpr int64_t kHeaderBytes = 128;
inline constexpr int64_t kSectionAlign = 64;
inline constexpr char kLinearMagic[8] = {'X', 'K', 'L', 'I', 'N', 'E', 'A', 'R'};
inline constexpr int32_t kLinearVersion = 1;

struct LinearHeader {
  char magic[8];
  int32_t version;
  LinearScheme scheme;
  LinearLayout layout;
  Fp8Scales fp8_scales;
  int32_t has_zeros;
  int32_t reserved;
  int64_t n, k;
  int64_t group;        // K elements per scale group (K for one group per channel)
  int64_t groups;       // ceil(K / group)
  int64_t weights_offset, scales_offset, zeros_offset;  // bytes from the tensor's start; 0: absent
  char packer[40];      // the implementation that packed it (NUL-terminated)
};
static_assert(sizeof(LinearHeader) <= kHeaderBytes, "the header must fit its bytes");

constexpr int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }
constexpr int64_t ceil_div(int64_t v, int64_t m) { return (v + m - 1) / m; }

// The sections' sizes and offsets, the same for every implementation.
struct LinearSizes {
  int64_t padded_n = 0, weights_bytes = 0, scales_bytes = 0, zeros_bytes = 0, sums_bytes = 0;
  int64_t weights_offset = 0, scales_offset = 0, zeros_offset = 0, sums_offset = 0, total = 0, row_bytes = 0;
};

constexpr LinearSizes linear_sizes(LinearScheme s, int64_t n, int64_t k, int64_t groups, bool zeros) {
  LinearSizes z;
  z.padded_n = round_up(n, kPanel);
  const int64_t padded_k = s == LinearScheme::kW8A8Int8 || s == LinearScheme::kW8A8Fp8 ? round_up(k, 4) : k;
  z.weights_bytes = z.padded_n * ceil_div(padded_k * scheme_bits(s), 8);
  z.scales_bytes = scheme_has_scales(s) ? z.padded_n * groups * 4 : 0;
  z.zeros_bytes = zeros ? z.padded_n * groups * 4 : 0;
  z.sums_bytes = scheme_has_sums(s) ? z.padded_n * groups * 4 : 0;
  z.weights_offset = kHeaderBytes;
  int64_t end = z.weights_offset + round_up(z.weights_bytes, kSectionAlign);
  if (z.scales_bytes > 0) {
    z.scales_offset = end;
    end += round_up(z.scales_bytes, kSectionAlign);
  }
  if (z.zeros_bytes > 0) {
    z.zeros_offset = end;
    end += round_up(z.zeros_bytes, kSectionAlign);
  }
  if (z.sums_bytes > 0) {
    z.sums_offset = end;
    end += round_up(z.sums_bytes, kSectionAlign);
  }
  z.row_bytes = n > 0 ? ceil_div(end, n) : 0;
  z.total = z.row_bytes * n;
  return z;
}

// What a header describes: the scheme, the layout, the fp8 scales, whether there are zeros, the
// sizes and the implementation that packed it.
//   make_linear_header({.scheme = s, .layout = layout, .fp8 = fp8, .zeros = zeros, .n = n, .k = k,
//                       .group = group, .groups = groups, .packer = packer});
struct LinearHeaderFields {
  LinearScheme scheme = LinearScheme::kFloat32;
  LinearLayout layout = LinearLayout::kRows;
  Fp8Scales fp8 = Fp8Scales::kNone;
  bool zeros = false;
  int64_t n = 0, k = 0;
  int64_t group = 0;   // K elements per scale group
  int64_t groups = 0;  // ceil(K / group)
  const char* packer = "";
};

// A header for these sizes; `packer` is cut to fit.
inline LinearHeader make_linear_header(const LinearHeaderFields& f) {
  const LinearSizes z = linear_sizes(f.scheme, f.n, f.k, f.groups, f.zeros);
  LinearHeader h{};
  std::memcpy(h.magic, kLinearMagic, sizeof(h.magic));
  h.version = kLinearVersion;
  h.scheme = f.scheme;
  h.layout = f.layout;
  h.fp8_scales = f.fp8;
  h.has_zeros = f.zeros ? 1 : 0;
  h.n = f.n;
  h.k = f.k;
  h.group = f.group;
  h.groups = f.groups;
  h.weights_offset = z.weights_offset;
  h.scales_offset = z.scales_offset;
  h.zeros_offset = z.zeros_offset;
  std::strncpy(h.packer, f.packer, sizeof(h.packer) - 1);
  return h;
}

}  // namespace xllm_kernel::kernels
