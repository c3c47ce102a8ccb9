// Torch-free description of the linear family's packed weights, shared by every implementation's
// bridges and the CPU kernels: the schemes, the packed tensor's header and the sizes of its sections.
//
// A packed weight is a uint8 tensor [N, row_bytes]: its first kHeaderBytes hold a LinearHeader,
// then come the implementation's sections, each starting at a multiple of kSectionAlign bytes:
//   weights   at most padded_n * ceil(K * bits / 8) bytes (bits: 32 f32, 16 bf16/f16, 8 int8/fp8, 4 int4)
//   scales    float32, at most padded_n * groups entries (int8, fp8, int4)
//   zeros     float32, at most padded_n * groups entries (int4)
// padded_n is N rounded up to kPanel. The total (and so the tensor's shape) follows from the scheme,
// N, K and the group layout alone, the same for every implementation: a fake (Meta) kernel gives the
// exact shape, and torch.compile sees N as the packed tensor's first dimension.
#pragma once

#include <cstdint>
#include <cstring>

namespace xllm_kernel::kernels {

enum class LinearScheme : int32_t { kFloat32 = 0, kBFloat16 = 1, kFloat16 = 2, kInt8 = 3, kFp8 = 4, kInt4 = 5 };

constexpr const char* scheme_name(LinearScheme s) {
  switch (s) {
    case LinearScheme::kFloat32: return "f32";
    case LinearScheme::kBFloat16: return "bf16";
    case LinearScheme::kFloat16: return "f16";
    case LinearScheme::kInt8: return "int8";
    case LinearScheme::kFp8: return "fp8";
    case LinearScheme::kInt4: return "int4";
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
    case LinearScheme::kFp8: return 8;
    case LinearScheme::kInt4: return 4;
  }
  return 0;
}

constexpr bool scheme_has_scales(LinearScheme s) {
  return s == LinearScheme::kInt8 || s == LinearScheme::kFp8 || s == LinearScheme::kInt4;
}

// How fp8 scales were given (the packed form always keeps one float32 scale per output channel and
// K group).
enum class Fp8Scales : int32_t { kNone = 0, kTensor = 1, kChannel = 2, kBlock = 3 };
inline constexpr int64_t kFp8Block = 128;  // fp8 block scales: one per 128 x 128 block of W

// Layouts of the sections (what the packing implementation chose).
enum class LinearLayout : int32_t {
  kRows = 0,    // weights [N][K] as given (int4: two K-neighbours per byte, low nibble first, each
                // stored as q + 8 without zeros), scales and zeros [N][groups]
  kPanels = 1,  // panels of kPanel output channels: weights [padded_n / kPanel][K][kPanel] (int4:
                // [K][kPanel / 2] bytes, byte i holds lane i in its low and lane i + kPanel / 2 in its
                // high nibble, as q + 8 without zeros), scales and zeros [panels][groups][kPanel]
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
  int64_t padded_n = 0, weights_bytes = 0, scales_bytes = 0, zeros_bytes = 0;
  int64_t weights_offset = 0, scales_offset = 0, zeros_offset = 0, total = 0, row_bytes = 0;
};

constexpr LinearSizes linear_sizes(LinearScheme s, int64_t n, int64_t k, int64_t groups, bool zeros) {
  LinearSizes z;
  z.padded_n = round_up(n, kPanel);
  z.weights_bytes = z.padded_n * ceil_div(k * scheme_bits(s), 8);
  z.scales_bytes = scheme_has_scales(s) ? z.padded_n * groups * 4 : 0;
  z.zeros_bytes = zeros ? z.padded_n * groups * 4 : 0;
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
