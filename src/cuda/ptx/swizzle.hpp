// The shared-memory swizzle modes that Hopper's copy engine (TMA) writes and wgmma reads. Plain C++
// (no device code), so that the host's tensor-map builder and the device's matrix descriptors name
// the same modes.
//
// A swizzled tile is stored in rows of S bytes (S = 32, 64, 128: the value of the enum) — TMA's
// box is S bytes wide in its innermost dimension — and the 16-byte chunk c of row r sits at chunk
// c XOR f(r), where f takes address bits 7.. of the row: for 128B, chunk c ^ (r % 8); for 64B,
// c ^ ((r / 2) % 4); for 32B, c ^ ((r / 4) % 2). The pattern repeats every 8 rows (8·S bytes: 1024
// for 128B), and both TMA and wgmma apply it to the absolute shared-memory address: a swizzled
// tile starts at a multiple of 8·S bytes. `none` stores the box row after row, unpermuted.
#pragma once

namespace flashattn::ptx {

enum class Swizzle : int { none = 0, b32 = 32, b64 = 64, b128 = 128 };

// Bytes in one repeat of the pattern (8 rows of S bytes); 0 for none.
constexpr int swizzle_atom_bytes(Swizzle s) { return 8 * static_cast<int>(s); }

// Where byte `byte` (0..127) of row `row` of a 128B-swizzled tile lies, from the tile's start: what a
// thread storing into such a tile with ordinary stores writes to (the sm90 backward's dSᵀ), so that
// wgmma reads it as it reads TMA's tiles.
constexpr int swizzle_128b_offset(int row, int byte) {
  return row * 128 + (((byte >> 4) ^ (row & 7)) << 4) + (byte & 15);
}

}  // namespace flashattn::ptx
