// The order in which a persistent CTA of the cooperative kernel takes the scheduler's tiles.
//
// Static: the i-th tile of CTA b is b + i * gridDim.x. Dynamic (KernelParams::tile_counter set): the first
// tile is b, and each later one is gridDim.x plus the value the CTA takes from a device counter that starts
// at 0 for the launch, so a CTA takes its next tile when it is free. m-grouped: under the static order a CTA
// whose tiles finish early (half tiles, an expert's last rows) runs ahead of the others, so that an expert's
// m-tiles of one n-tile, adjacent in the scheduler's order, no longer run together and each loads the
// expert's weight panel from HBM; under the dynamic order the tiles in flight stay within about two grid
// widths of that order however long each one takes. k-grouped (the weight gradient): a tile runs its
// expert's rows, and under the static order the CTAs that draw a long expert's tiles finish last; the
// dynamic order, with the scheduler's longest-first expert order, evens out the CTAs' ends.
//
// The producer claims the tiles and passes each one's number to both consumer warpgroups through a ring of
// shared-memory slots with full/empty mbarriers. Entry i of the CTA's sequence is in slot i % kSlots; after
// the last tile the producer publishes one entry past the tile count. The ping-pong kernel keeps the static
// order (kernel_pingpong.cuh): given this one, its GLU and dGLU were 0.4-3.4% slower, and with the order's
// state in its consumers its GLU was 5-9% slower even in the static order (docs/kernels.md).
#pragma once

#include <cuda/ptx>

#include <cstdint>

#include "sm90/mainloop.cuh"
#include "sm90/params.cuh"

namespace moegemm::sm90 {

struct TileOrder {
  static constexpr int kSlots = 8;       // entries the producer may publish ahead of the consumers
  static constexpr int kReaders = 256;  // every thread of both consumer warpgroups reads every entry
  /// Shared memory of the ring: kSlots tile numbers and a full and an empty barrier per slot.
  static constexpr int kBytes = kSlots * (4 + 2 * 8);

  int* counter;  // device counter of the dynamic order, nullptr for the static one
  volatile int* slot_tile;
  uint64_t* full;
  uint64_t* empty;
  int first;   // the CTA's first tile: its block (or, for cluster pairs, cluster) index
  int stride;  // tiles between the static order's entries: the grid's CTAs (or cluster pairs)

  /// `ring` is kBytes of 8-byte aligned shared memory. `pair` = 2: the CTAs of a cluster pair take the same
  /// tiles, in the static order (the launcher gives pairs no counter).
  __device__ TileOrder(const KernelParams& p, uint8_t* ring, int pair = 1)
      : counter(pair == 1 ? p.tile_counter : nullptr),
        slot_tile(reinterpret_cast<int*>(ring + 2 * kSlots * 8)),
        full(reinterpret_cast<uint64_t*>(ring)),
        empty(reinterpret_cast<uint64_t*>(ring) + kSlots),
        first(static_cast<int>(blockIdx.x) / pair),
        stride(static_cast<int>(gridDim.x) / pair) {}

  /// One thread, before the CTA's first __syncthreads.
  __device__ void init_barriers() const {
    for (int s = 0; s < kSlots; ++s) {
      cuda::ptx::mbarrier_init(&full[s], 1);
      cuda::ptx::mbarrier_init(&empty[s], kReaders);
    }
  }

  __device__ bool dynamic() const { return counter != nullptr; }

  /// Producer: the tile after `t` in the sequence. The dynamic claim is an atomic whose result the caller
  /// should not need before it has issued the loads of t, so that its latency hides under them.
  __device__ int claim_after(int t) const {
    return dynamic() ? stride + atomicAdd(counter, 1) : t + stride;
  }

  /// Producer (dynamic order): publishes tile t as entry i, once every reader has taken entry i - kSlots.
  __device__ void publish(int i, int t) const {
    const int slot = i % kSlots;
    mbar_wait(&empty[slot], ((i / kSlots) & 1) ^ 1);
    slot_tile[slot] = t;
    cuda::ptx::mbarrier_arrive(&full[slot]);
  }

  /// Consumer thread: entry i of the CTA's sequence (i = 0, 1, ... in order).
  __device__ int take(int i) const {
    if (!dynamic()) return first + i * stride;
    const int slot = i % kSlots;
    mbar_wait(&full[slot], (i / kSlots) & 1);
    const int t = slot_tile[slot];
    cuda::ptx::mbarrier_arrive(&empty[slot]);
    return t;
  }
};

}  // namespace moegemm::sm90
