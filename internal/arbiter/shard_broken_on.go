//go:build gate_broken_shard

package arbiter

// brokenShardFence: this build is BROKEN ON PURPOSE (tag gate_broken_shard).
// Grants on an entity shard skip the shard map fence, so an arbiter whose
// map is behind grants a moved key on its old shard. The stale-map test and
// the release gate build lockd this way to show they catch it; never ship it.
const brokenShardFence = true
