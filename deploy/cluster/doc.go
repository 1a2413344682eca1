// Package cluster holds examples that run `crem sim` sweeps on batch systems: a Kubernetes
// Indexed Job with its merge Job, and a Slurm job array (README.md). It has no code; its tests
// check that each example's shard count agrees with itself (completions and --shard auto/N,
// --array and auto/N), that the Job does not retry a bad configuration (exit 2), and that the
// merge reads the folder the shards write.
package cluster
