"""The local lab: real Pulsar regions as processes on one machine, for users, tests and benchmarks."""
