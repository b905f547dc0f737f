//go:build !gate_broken_shard

package arbiter

// brokenShardFence is false: every grant on an entity shard is fenced by
// the shard map version it was routed by.
const brokenShardFence = false
